"""How long the tests wait for things.

Tests wait on a condition (a socket that appears, a step that arrives, a
finding that is named), never for a fixed time, and they give it a generous
deadline: what takes milliseconds on an idle machine takes seconds on a loaded
two-core one (another test suite beside this one, torch starting in four
processes at once).  A deadline costs time only when the test fails anyway, so
none of these is tight.  (promutil.py and synthetic.py keep their own copy of
WAIT_S: bench/ scripts import them without the tests package.)
"""

from __future__ import annotations

#: something that follows from what the test just did: a reply, a step record,
#: a redrawn screen, a viewer dropped
WAIT_S = 60.0
#: a process that has to start Python (and torch) first: a training job
#: training, a torchrun job's ranks all up
START_S = 180.0
#: a whole ``gputui`` command run in a subprocess
RUN_S = 180.0
