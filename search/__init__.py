"""What runs next: the tree of stages, the tree policy, the proposers (TPE, schedules,
greedy, LLM), diagnosis steering, novelty, the Optuna study, the LLM client, its context
and prompts, and train.py edits. It never imports sandbox, MLflow or the user interface.
"""
