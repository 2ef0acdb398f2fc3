"""The session's winner as an MLflow model, where people look for a trained model.

At the end the best node's checkpoint is logged under its own run as ``model``, in the
transformers flavour: the weights, the tokenizer and its chat template, as a
text-generation pipeline that ``mlflow.transformers.load_model`` gives back. With
``--register NAME`` it is also a new version of ``NAME`` in the model registry. The
checkpoint passed the evaluator's checks (safetensors and JSON only), and it is loaded
with ``trust_remote_code=False``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

MODEL_NAME = "model"
REQUIREMENTS = ("transformers", "torch", "tokenizers", "safetensors")


@dataclass
class LoggedModel:
    uri: str  # models:/<id>, what load_model takes
    registered: str | None  # models:/<name>/<version> with --register


def log_winner(tracking_uri: str, run_id: str, checkpoint: Path, register: str | None = None) -> LoggedModel:
    """Log ``checkpoint`` as the model of run ``run_id`` (and register it as ``register``)."""
    import mlflow
    import mlflow.transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    logging.getLogger("mlflow.transformers").setLevel(logging.ERROR)  # no model card or license: not on a hub
    model = AutoModelForCausalLM.from_pretrained(checkpoint, trust_remote_code=False, use_safetensors=True)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=False)
    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(run_id=run_id):
        info = mlflow.transformers.log_model(
            {"model": model, "tokenizer": tokenizer}, name=MODEL_NAME, task="text-generation",
            registered_model_name=register, pip_requirements=pinned(REQUIREMENTS),
        )
    version = getattr(info, "registered_model_version", None)
    return LoggedModel(info.model_uri, f"models:/{register}/{version}" if register and version else None)


def pinned(packages: tuple[str, ...]) -> list[str]:
    """The installed versions, so MLflow need not infer them (which loads the model again)."""
    return [f"{name}=={metadata.version(name)}" for name in packages]
