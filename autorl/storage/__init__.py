"""What a session leaves behind: MLflow runs through ``tracking`` (the default SQLite
store made by ``store``), the node and session codecs (``records``), the session lock,
and reading sessions back for ``ls`` and ``show`` (``report``)."""
