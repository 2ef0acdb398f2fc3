"""Running one stage: the template it comes from, the session's workspace and frozen
env/, the trial spec, training in the sandbox and scoring with the frozen evaluator,
here (``executor.LocalStages``) or as a Ray job (``executor.RayExecutor``,
``ray_stages``, ``remote_stage``)."""
