"""Recording lines to snapshots, decoding only the processes that changed.

A recording of a node with thousands of GPU processes holds, on every line, the
same processes as the line before, most of them with the same numbers (an idle
inference worker's row does not change).  Parsing and checking every one of them
again is most of a replay's cost: 0.6 s a line for 20,000 processes.  So the
``processes`` array of a line is cut into one piece of text per process, and a
piece that is byte for byte one of the previous line's is that line's process
value again, without parsing; only the others are parsed and checked.

The cut is safe on JSON: ``},{"pid":`` cannot occur inside a JSON string (a
quote inside a string is always escaped), so it only ever separates two objects
whose first key is ``pid``, as gputui writes them.  Each piece must then parse
as exactly one JSON object on its own (a cut inside a nested value leaves a
piece with an unclosed bracket); a line that is not cut cleanly, or that does not
decode this way, is decoded whole, as before, with the same errors.
"""

from __future__ import annotations

import dataclasses
import gc
from itertools import compress, count
from operator import eq, not_
from typing import cast

from gputui.collectors.recording_io import load_line, load_objects, value_end
from gputui.snapshot.codec import DecodeError, converter_of, snapshot_from_json
from gputui.snapshot.model import MAX_ITEMS, ProcessSnapshot, Snapshot

_KEY = b'"processes":['
_FIRST = b'{"pid":'
_START = _KEY + _FIRST
_SEPARATOR = b'},{"pid":'
#: what stands for the processes while the rest of the line is parsed: a value no
#: snapshot can hold there (a process is an object), checked after
_PLACEHOLDER = b'"processes":[[[]]]'
_MAX_PROCESSES = MAX_ITEMS["Snapshot.processes"]
#: when more than one process in this many differs from the one at its place in
#: the line before, the others are looked up by their text: some moved
_MOVED = 5
#: new processes read at once (their JSON values held until converted)
_BATCH = 512
#: a line of at least this many processes leaves everything the collector
#: tracks out of it (``gc.freeze``) before the collector resumes, so that its
#: young collection does not walk the line's values; None: never.  The monitor
#: sets it, and gives the frozen objects back for a full collection now and
#: then (gputui.tui.footprint.SampleFreezer).
freeze_from: int | None = None


class SnapshotLines:
    """Decodes the lines of one pass over a recording, in order."""

    def __init__(self) -> None:
        #: the previous line's processes and their texts, in order, and by text
        #: (None until needed)
        self._pieces: list[bytes] = []
        self._processes: list[ProcessSnapshot] = []
        self._known: dict[bytes, ProcessSnapshot] | None = {}

    def decode(self, line: bytes) -> Snapshot:
        """The snapshot of ``line``; DecodeError or ValueError as
        ``snapshot_from_json(load_line(line))`` raises them."""
        # A line makes thousands of short-lived, acyclic values: the collector is
        # paused meanwhile, else its passes over every live object (the monitor's
        # processes, their history) cost a fifth of the decode.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            snapshot = self._decode_pieces(line)
        except (DecodeError, ValueError):
            snapshot = None
        finally:
            if paused:
                if freeze_from is not None and len(self._processes) >= freeze_from:
                    gc.freeze()
                gc.enable()
        if snapshot is None:
            self._pieces, self._processes, self._known = [], [], {}
            return snapshot_from_json(load_line(line))
        return snapshot

    def _decode_pieces(self, line: bytes) -> Snapshot | None:
        start = line.find(_START)
        if start < 0 or line.find(_START, start + 1) >= 0:
            return None
        # Each process's text without the '{"pid":' before it and the '}' after it:
        # the cut leaves the middle ones so, and the first and last are made so
        # (the whole line is cut: no copy of its processes first).
        pieces = line.split(_SEPARATOR)
        head = start + len(_START)
        if len(pieces) > _MAX_PROCESSES or len(pieces[0]) < head:
            return None  # a cut before the processes: not a line as gputui writes them
        pieces[0] = pieces[0][head:]
        # The last piece holds the last process and the rest of the line after it.
        last_text = (_FIRST + pieces[-1]).decode("utf-8")
        end = value_end(last_text)
        rest = last_text[end:]
        if not rest.startswith("]") or last_text[end - 1] != "}":
            return None
        pieces[-1] = last_text[len(_FIRST) : end - 1].encode("utf-8")
        top = load_line(line[:start] + _PLACEHOLDER + rest[1:].encode("utf-8"))
        if type(top) is not dict or top.get("processes") != [[[]]]:
            return None
        top["processes"] = []
        # A process whose text is the one at its place in the line before (most
        # of them: the processes keep their order) is found by a comparison of
        # the two texts in C, without hashing either; the others by their text
        # when many differ (a process that came or went moved those after it).
        # A line of 20,000 processes, nine in ten unchanged, is then mostly the
        # few thousand it must decode.
        old_pieces = self._pieces
        processes: list[ProcessSnapshot | None]
        if len(old_pieces) == len(pieces):
            processes = list(self._processes)  # those at a missing place are replaced
            missing = list(compress(count(), map(not_, map(eq, pieces, old_pieces))))
        else:
            processes = [None] * len(pieces)
            missing = list(range(len(pieces)))
        if len(missing) > len(pieces) // _MOVED:
            # processes came or went before others, which moved: look them up
            known = self._known_by_text()
            for i in missing:
                processes[i] = known.get(pieces[i])
            missing = [i for i in missing if processes[i] is None]
        convert = converter_of(ProcessSnapshot)
        for at in range(0, len(missing), _BATCH):
            batch = missing[at : at + _BATCH]
            values = load_objects([pieces[i] for i in batch], _FIRST, b"}")
            for i, value in zip(batch, values, strict=True):
                processes[i] = convert(value)
        done = cast(list[ProcessSnapshot], processes)  # every None filled
        snapshot = dataclasses.replace(snapshot_from_json(top), processes=tuple(done))
        self._pieces, self._processes, self._known = pieces, done, None
        return snapshot

    def _known_by_text(self) -> dict[bytes, ProcessSnapshot]:
        """The previous line's processes by their text (built when a process
        moved, the first time it is needed)."""
        if self._known is None:
            self._known = dict(zip(self._pieces, self._processes, strict=True))
        return self._known
