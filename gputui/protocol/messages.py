"""The protocol's vocabulary: version, message types, phase names, step flags and
capture states, shared by the hook and every viewer.

Every frame is one JSON object with ``"v"`` (the protocol version) and ``"type"``.
The typed messages built from these names are in :mod:`gputui.protocol.schema`
and :mod:`gputui.protocol.capture`.  Plain constants (one IntFlag) keep the hook
cheap to import in any interpreter.
"""

from __future__ import annotations

import enum

#: Bumped on any incompatible change of a message's meaning.  A viewer that gets a
#: hello with another major version says so instead of misreading the data.
PROTOCOL_VERSION = 1

# hook -> viewer
HELLO = "hello"  # first frame on every connection
STEPS = "steps"  # a batch of step records (plus how many this viewer missed)
SYNCED = "synced"  # the backlog asked for in SUBSCRIBE has been sent
STATUS = "status"  # about once a second: counters, capture state, coarse-phase flags
MEMORY = "memory"  # device memory samples (<= 2 Hz, only while CUDA is in use)
CAPTURE_STATUS = "capture_status"  # progress of a capture: armed/warmup/recording/...
CAPTURE_RESULT = "capture_result"  # reduced tables + Chrome trace path
ERROR = "error"  # a request the hook could not serve; the connection stays open
BYE = "bye"  # the job is exiting; the socket goes away next
PONG = "pong"  # the answer to PING
#: progress of a memory snapshot (``protocol.memsnap``): armed/recording/...
MEMSNAP_STATUS = "memory_snapshot_status"
#: a memory snapshot's summary and the path of torch's snapshot file
MEMSNAP_RESULT = "memory_snapshot_result"
#: where the training thread's time went, by Python function and line
#: (``protocol.profile``): ~every 2 s to subscribed viewers, and on request
PYTHON_PROFILE = "python_profile"
#: what torch.compile did: graph breaks, recompiles, compile time
#: (``protocol.compile``): when it changes, and after a subscribe
COMPILE = "compile"

# viewer -> hook
SUBSCRIBE = "subscribe"  # {"history": n, "memory": bool}: start the live stream
CAPTURE = "capture"  # {"steps": n, "warmup": k, "shapes", "stacks", "memory", "id"}
CAPTURE_CANCEL = "capture_cancel"  # cancel an armed capture that has not started
PING = "ping"  # answered with PONG; lets a viewer check the hook is responsive
#: {"id", "steps", "max_entries"}: record CUDA allocation history for N steps
MEMSNAP = "memory_snapshot"
#: {}: answered with PYTHON_PROFILE (or ERROR: the sampler is off)
GET_PYTHON_PROFILE = "get_python_profile"

HOOK_TYPES = frozenset(
    {
        HELLO,
        STEPS,
        SYNCED,
        STATUS,
        MEMORY,
        CAPTURE_STATUS,
        CAPTURE_RESULT,
        ERROR,
        BYE,
        PONG,
        MEMSNAP_STATUS,
        MEMSNAP_RESULT,
        PYTHON_PROFILE,
        COMPILE,
    }
)
VIEWER_TYPES = frozenset({SUBSCRIBE, CAPTURE, CAPTURE_CANCEL, PING, MEMSNAP, GET_PYTHON_PROFILE})

# -- phases ---------------------------------------------------------------------------------
#: The phases the hook finds without user code.  User-named phases (``phase("x")``)
#: come on top; whatever ran outside every phase is OTHER.
DATA = "data"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
#: time spent waiting in collectives: explicit ``torch.distributed`` calls, and the
#: end of a DDP backward waiting for its gradient all-reduce (docs/hook.md)
COMM = "comm"
OTHER = "other"
#: Display order of the automatic phases (user phases follow, OTHER comes last).
BUILTIN_PHASES = (DATA, FORWARD, BACKWARD, COMM, OPTIMIZER)


# -- step flags -------------------------------------------------------------------------------
class StepFlag(enum.IntFlag):
    """Bits of a step record's ``flags``."""

    NONE = 0
    #: a gputui capture was recording during this step (the profiler slows it down)
    PROFILED = 1
    #: a hook point was reached while torch.compile was tracing
    COMPILE = 2
    #: a CUDA graph was being captured: the step has no GPU times
    GRAPH_CAPTURE = 4
    #: a DataLoader iterator gave its first batch in this step: an epoch began (its
    #: worker processes start then, unless persistent_workers keeps them)
    LOADER_START = 8


# -- capture states (CAPTURE_STATUS "state") -------------------------------------------------------
CAPTURE_ARMED = "armed"  # accepted; starts at the next step boundary
CAPTURE_WARMUP = "warmup"  # profiler running, steps not yet kept
CAPTURE_RECORDING = "recording"
CAPTURE_PROCESSING = "processing"  # profiler stopped; reducing off the training thread
#: the capture will not run: torch not imported, the hook disabled, or the user's
#: own profiler session running (only one per process)
CAPTURE_REFUSED = "refused"
#: the capture will not run because another capture is armed or running
CAPTURE_BUSY = "busy"
CAPTURE_CANCELLED = "cancelled"  # an armed capture was cancelled before it started
CAPTURE_NOT_ARMED = "not_armed"  # a cancel arrived while nothing was armed
CAPTURE_FAILED = "failed"  # bad request, or the profiler raised

#: A capture in one of these states is under way (its result is still to come).
CAPTURE_ACTIVE = frozenset({CAPTURE_ARMED, CAPTURE_WARMUP, CAPTURE_RECORDING, CAPTURE_PROCESSING})
#: A capture in one of these states is over without a result.
CAPTURE_ENDED = frozenset(
    {CAPTURE_REFUSED, CAPTURE_BUSY, CAPTURE_CANCELLED, CAPTURE_NOT_ARMED, CAPTURE_FAILED}
)
CAPTURE_STATES = CAPTURE_ACTIVE | CAPTURE_ENDED

#: A capture request's limits (the hook refuses others; viewers check them first).
CAPTURE_MAX_STEPS = 200
CAPTURE_MAX_WARMUP = 20
