"""corrupt_checkpoint: damage the newest checkpoint on disk (truncate a file, flip a bit, or
delete the whole directory), as a failing disk or an interrupted copy would."""

import shutil
from typing import Literal

from rlsim.faults.base import Fault
from rlsim.fields import Strict
from rlsim.files import read_file, write_file


class CorruptCheckpoint(Fault):
    name = "corrupt_checkpoint"
    disruptive = False  # files only: the trainer meets it when it next loads the checkpoint
    harms_real_cluster = True

    class Params(Strict):
        mode: Literal["truncate", "bitflip", "delete"] = "bitflip"
        which: Literal["latest"] = "latest"

    def inject(self):
        root = self.ctx.run_dir / "checkpoints"
        dirs = sorted((p for p in root.glob("global_step_*") if p.is_dir()),
                      key=lambda p: int(p.name.rsplit("_", 1)[1]))
        if not dirs:
            raise FileNotFoundError(f"corrupt_checkpoint: no checkpoint under {root} yet; fire it "
                                    "later (at: {event: checkpoint_saved})")
        latest = dirs[-1]
        mode = self.params.mode
        if mode == "delete":
            shutil.rmtree(latest)
            return {"mode": mode, "path": str(latest)}
        files = sorted((p for p in latest.rglob("*") if p.is_file() and p.stat().st_size > 0
                        and p.name != "manifest.json"), key=lambda p: -p.stat().st_size)
        target = files[0]
        data = bytearray(read_file(target, 1 << 40))
        if mode == "truncate":
            data = data[: len(data) // 2]
        else:
            at = self.ctx.rng.randrange(len(data))
            data[at] ^= 1 << self.ctx.rng.randrange(8)
        write_file(target, bytes(data))
        return {"mode": mode, "path": str(target), "size": len(data)}
