"""A template from the user's own data file: `autorl init DIR --from-data FILE`.

The generated template is a copy of ``skeleton/`` (a generic train.py and a frozen env/
whose task.py reads ``env/task.toml`` and the splits in ``env/data/``) with the
settings, the splits, the base model, ``space.toml``, ``constants.toml`` and a stub
``program.md`` written for the file and the model. Everything is checked before the
folder appears: bad input gets one line and creates nothing.
"""
