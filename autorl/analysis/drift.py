"""How far a stage moved the weights: the relative L2 distance of its checkpoint from its start.

At ``beta = 0`` GRPO computes no KL to a reference, so nothing in a stage's curves says how far
the policy drifted. The weights say it: ``‖θ_end − θ_start‖ / ‖θ_start‖`` over the floating-point
tensors both checkpoints hold under the same name and shape. The controller computes it outside
the sandbox, from the checkpoint files, so a trial cannot report a drift of its own making.

Tensors are read one at a time (safetensors memory-maps them), so a large model costs a read of
both checkpoints, not their memory. A checkpoint that holds other weights than its start (a LoRA
adapter against a full base model) shares no tensor with it: then there is no drift to report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Drift:
    relative: float  # ‖end − start‖ / ‖start‖ over the shared tensors
    tensors: int  # how many tensors were compared


def weight_drift(start: Path, end: Path) -> Drift | None:
    """The drift from the checkpoint folder ``start`` to ``end``; None when they share no
    floating-point tensor (or either holds no safetensors file)."""
    from contextlib import ExitStack

    from safetensors import safe_open  # here, not at the top: the controller imports no torch until a stage ended

    moved = norm = 0.0
    tensors = 0
    with ExitStack() as files:
        ends = {}
        for path in _shards(end):
            handle = files.enter_context(safe_open(str(path), framework="pt"))
            ends.update({name: handle for name in handle.keys()})
        for path in _shards(start):
            handle = files.enter_context(safe_open(str(path), framework="pt"))
            for name in handle.keys():
                before = handle.get_tensor(name)
                if name not in ends or not before.is_floating_point():
                    continue
                after = ends[name].get_tensor(name)
                if after.shape != before.shape:
                    continue
                before, after = before.double(), after.double()
                moved += ((after - before) ** 2).sum().item()
                norm += (before ** 2).sum().item()
                tensors += 1
    if not tensors or norm == 0.0:
        return None
    return Drift(relative=(moved / norm) ** 0.5, tensors=tensors)


def _shards(folder: Path) -> list[Path]:
    folder = Path(folder)
    return sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
