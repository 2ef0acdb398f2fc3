"""The research loop: the controller and what it hands each proposal and stage to.

``controller`` is the loop itself (propose, review, run, record, repeat); ``lifecycle``
owns a node from proposal to record; ``review`` acts on a person's decisions
(``approval`` waits for them, ``channel`` carries them from attached viewers);
``observer`` is the hooks the views implement; ``reconcile`` carries on what a stop
left in flight; ``scoring`` scores the base model and the test split; ``budget``,
``goals`` and ``ledger`` say what may still be spent, when to stop, and what was spent;
``slots`` and ``deferred`` are the threads a stage and a plot run in.
"""
