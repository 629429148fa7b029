"""One error hierarchy for everything autotune reports to a user.

The CLI turns any :class:`AutotuneError` into a single line on stderr and exit
code 2. Candidate failures inside a search are not errors: they are recorded
with a :class:`FailureClass` and the search goes on.
"""

from __future__ import annotations

import enum


class AutotuneError(Exception):
    """Base class: a problem the user can fix, shown as one line."""


class InputError(AutotuneError):
    """A bad value on the command line or in a file.

    Args:
        what: the name of the input, e.g. ``--shape``.
        value: the bad value as the user gave it.
        valid: what would have been accepted, e.g. ``"4096 or MxNxK"``.
    """

    def __init__(self, what: str, value: object, valid: str):
        self.what, self.value, self.valid = what, value, valid
        super().__init__(f"invalid {what} {value!r}: expected {valid}")


class NoGpuError(AutotuneError):
    """A command needs a CUDA GPU and none is attached."""


class GpuMismatchError(AutotuneError):
    """The GPU asked for is not the GPU attached."""

    def __init__(self, requested: str, attached_key: str, attached_name: str):
        self.requested, self.attached_key = requested, attached_key
        super().__init__(
            f"--gpu {requested} does not match the attached GPU {attached_name!r} "
            f"({attached_key}); use --gpu {attached_key} or --gpu auto"
        )


class DatabaseError(AutotuneError):
    """The results database cannot be opened, read or written."""


class SearchError(AutotuneError):
    """A search cannot go on: the cuBLAS reference or the closing measurement failed."""


class CompilerError(AutotuneError):
    """NVRTC or the CUDA headers it needs cannot be found."""


class SpaceError(AutotuneError):
    """A search-space file is malformed."""


class FailureClass(str, enum.Enum):
    """Why a candidate produced no valid measurement (stored with the trial)."""

    REJECTED = "rejected"  # a static rule, before compiling
    COMPILE_ERROR = "compile_error"  # NVRTC refused the source
    RESOURCE = "resource"  # ptxas report over a limit (registers, smem, spills)
    LAUNCH_ERROR = "launch_error"  # the launch itself failed
    FAULT = "fault"  # the kernel faulted; the worker context is poisoned
    TIMEOUT = "timeout"  # the worker did not answer in time and was killed
    CRASH = "crash"  # the worker process died
    WRONG_ANSWER = "wrong_answer"  # verification against cuBLAS failed
    NOISY = "noisy"  # timings too spread to trust
