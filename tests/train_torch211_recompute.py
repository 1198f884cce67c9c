"""`python -m suite.train ARGS` under the FSDP2 recompute of torch < 2.13, for torchrun in tests.

torch 2.11 (the GPU machine's) returns from FSDP2's pre-forward hook before the mixed-precision
input cast when the hook fires in an activation-checkpoint recompute (TrainingState.PRE_BACKWARD,
pytorch/pytorch#159359); 2.13 casts there too (#182580). Where this torch has the 2.13 method,
it is made to skip the cast in that state, so a CPU run recomputes as the GPU's torch does.
"""

import sys

from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState
from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

from suite.train.__main__ import main

_cast = getattr(FSDPState, "_cast_forward_inputs", None)
if _cast is not None:

    def _cast_outside_recompute(self, args, kwargs):
        if self._training_state == TrainingState.PRE_BACKWARD:
            return args, kwargs
        return _cast(self, args, kwargs)

    FSDPState._cast_forward_inputs = _cast_outside_recompute

if __name__ == "__main__":
    main(sys.argv[1:])
