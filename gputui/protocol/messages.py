"""Protocol version and message type names shared by the hook and its viewers.

Every frame is one JSON object with ``"v"`` (the protocol version) and ``"type"``.
Kept as plain string constants (no enum) so the hook stays cheap to import in any
interpreter.
"""

from __future__ import annotations

#: Bumped on any incompatible change of a message's meaning.  A viewer that gets a
#: hello with another major version says so instead of misreading the data.
PROTOCOL_VERSION = 1

# hook -> viewer
HELLO = "hello"  # first frame on every connection
STEPS = "steps"  # a batch of step records (plus how many this viewer missed)
SYNCED = "synced"  # the backlog asked for in SUBSCRIBE has been sent
STATUS = "status"  # about once a second: counters, capture state, coarse-phase flags
MEMORY = "memory"  # device memory sample (<= 2 Hz, only while CUDA is in use)
CAPTURE_STATUS = "capture_status"  # progress of a capture: armed/warmup/recording/...
CAPTURE_RESULT = "capture_result"  # reduced tables + Chrome trace path
ERROR = "error"  # a request the hook could not serve; the connection stays open
BYE = "bye"  # the job is exiting; the socket goes away next

# viewer -> hook
SUBSCRIBE = "subscribe"  # {"history": n, "memory": bool}: start the live stream
CAPTURE = "capture"  # {"steps": n, "warmup": k, "shapes", "stacks", "memory", "id"}
CAPTURE_CANCEL = "capture_cancel"  # cancel an armed capture that has not started
PING = "ping"  # answered with PONG; lets a viewer check the hook is responsive
PONG = "pong"

HOOK_TYPES = frozenset(
    {HELLO, STEPS, SYNCED, STATUS, MEMORY, CAPTURE_STATUS, CAPTURE_RESULT, ERROR, BYE, PONG}
)
VIEWER_TYPES = frozenset({SUBSCRIBE, CAPTURE, CAPTURE_CANCEL, PING})

# capture states carried by CAPTURE_STATUS
CAPTURE_ARMED = "armed"  # waiting for the next step boundary
CAPTURE_WARMUP = "warmup"
CAPTURE_RECORDING = "recording"
CAPTURE_PROCESSING = "processing"  # profiler stopped; reducing off the training thread
CAPTURE_REFUSED = "refused"  # e.g. the user's own profiler is running
CAPTURE_BUSY = "busy"  # another capture is armed or running
CAPTURE_CANCELLED = "cancelled"
CAPTURE_FAILED = "failed"
