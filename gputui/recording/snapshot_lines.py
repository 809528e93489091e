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

A process that changed mostly changed its numbers (CPU, memory, utilization):
its user, name and command line, a third of its text and most of its parse and
check, are as they were.  Those three fields come as one run of text, from
``,"user":`` to ``,"cpu_pct":`` (the model's order, which gputui writes); a
changed process whose run is byte for byte the one of the process at its place
in the line before takes that process's three values, and only the rest of its
text is parsed.  The values of a run depend on its text alone when the run is at
the object's top level (no bracket before it in the piece) and parses on its own
as an object of those three keys, and the rest holds none of them: then the
process is the one the whole piece reads as.  A piece for which any of this does
not hold is read whole.
"""

from __future__ import annotations

import dataclasses
import gc
from itertools import compress, count
from operator import eq, not_
from typing import cast

from gputui.recording.io import load_line, load_objects, value_end
from gputui.snapshot.codec import (
    DecodeError,
    converter_of,
    dataclass_plan,
    snapshot_from_json,
)
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
#: the run of a process's text that holds its user, name and command line:
#: from its start to the start of the key after it
_RUN_START = b',"user":'
_RUN_END = b',"cpu_pct":'
_RUN_KEYS = frozenset(("user", "name", "cmdline"))
#: a line of at least this many processes leaves everything the collector
#: tracks out of it (``gc.freeze``) before the collector resumes, so that its
#: young collection does not walk the line's values; None: never.  The monitor
#: sets it, and gives the frozen objects back for a full collection now and
#: then (gputui.tui.footprint.SampleFreezer).
freeze_from: int | None = None


class UnknownPlace(DecodeError):
    """A compact line's process stands for one the line before does not have."""


class SnapshotLines:
    """Decodes the lines of one pass over a recording, in order."""

    def __init__(self) -> None:
        #: the previous line's pieces as they were on it (a compact line's
        #: ``{"pid": PID}``: the digits), to compare the next line's with
        self._raw: list[bytes] = []
        #: the previous line's processes and their texts (a compact one's: the
        #: text it stands for), in order, and by text (None until needed)
        self._pieces: list[bytes] = []
        self._processes: list[ProcessSnapshot] = []
        #: for each of them, where in its text the run of its user, name and
        #: command line starts when its values are that run's (the module's
        #: notes), else 0
        self._run_at: list[int] = []
        self._known: dict[bytes, int] | None = {}
        #: whether a line came before (read or not)
        self._seen = False

    def decode(self, line: bytes) -> Snapshot:
        """The snapshot of ``line``; DecodeError or ValueError as
        ``snapshot_from_json(load_line(line))`` raises them."""
        # A line makes thousands of short-lived, acyclic values: the collector is
        # paused meanwhile, else its passes over every live object (the monitor's
        # processes, their history) cost a fifth of the decode.
        seen, self._seen = self._seen, True
        unknown: UnknownPlace | None = None
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            snapshot = self._decode_pieces(line)
        except UnknownPlace as exc:
            snapshot, unknown = None, exc
        except (DecodeError, ValueError):
            snapshot = None
        finally:
            if paused:
                if freeze_from is not None and len(self._processes) >= freeze_from:
                    gc.freeze()
                gc.enable()
        if snapshot is None:
            self._forget()
            if unknown is None or not seen:
                return snapshot_from_json(load_line(line))
            # A line read whole has no "{"pid": PID}" for a process (a compact
            # line after one that could not be read): say so, rather than the
            # process's missing fields.
            try:
                return snapshot_from_json(load_line(line))
            except (DecodeError, ValueError):
                raise unknown from None
        return snapshot

    def assume(self, snapshot: Snapshot) -> None:
        """Take ``snapshot`` as the line just read (the same line as one decoded
        before): the next line's processes are compared with its processes.
        Their texts are not kept: each of them is decoded anew when it changes,
        and a pid alone takes the process at its place."""
        count = len(snapshot.processes)
        # a text no piece can be: the cut removes every separator
        self._raw = [_SEPARATOR] * count
        self._pieces = self._raw
        self._processes = list(snapshot.processes)
        self._run_at = [0] * count
        self._known, self._seen = None, True

    def _forget(self) -> None:
        self._raw, self._pieces, self._processes, self._run_at = [], [], [], []
        self._known = {}

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
        raw = pieces
        old_pieces = self._pieces
        old_processes = self._processes
        processes: list[ProcessSnapshot | None]
        if len(self._raw) == len(pieces):
            processes = list(old_processes)  # those at a missing place are replaced
            run_at = list(self._run_at)
            missing = list(compress(count(), map(not_, map(eq, pieces, self._raw))))
            pieces = list(old_pieces)  # the texts; those at a missing place replaced
            for i in missing:
                pieces[i] = raw[i]
        else:
            processes = [None] * len(pieces)
            run_at = [0] * len(pieces)
            missing = list(range(len(pieces)))
        # A compact line's process that is the one at its place on the line
        # before (gputui.recording.writer): that process, and its text.
        digits = list(map(bytes.isdigit, map(raw.__getitem__, missing)))
        if any(digits):
            self._take_places(list(compress(missing, digits)), raw, pieces, processes, run_at)
            missing = list(compress(missing, map(not_, digits)))
        if len(missing) > len(pieces) // _MOVED:
            # processes came or went before others, which moved: look them up
            known = self._known_by_text()
            old_run_at = self._run_at
            for i in missing:
                j = known.get(pieces[i])
                if j is None:
                    processes[i] = None
                else:
                    processes[i], run_at[i] = old_processes[j], old_run_at[j]
            missing = [i for i in missing if processes[i] is None]
        whole = self._decode_runs(pieces, missing, processes, run_at)
        convert = converter_of(ProcessSnapshot)
        for at in range(0, len(whole), _BATCH):
            batch = whole[at : at + _BATCH]
            values = load_objects([pieces[i] for i in batch], _FIRST, b"}")
            for i, value in zip(batch, values, strict=True):
                processes[i] = convert(value)
                run_at[i] = 0
        done = cast(list[ProcessSnapshot], processes)  # every None filled
        snapshot = dataclasses.replace(snapshot_from_json(top), processes=tuple(done))
        self._raw, self._pieces, self._processes = raw, pieces, done
        self._run_at, self._known = run_at, None
        return snapshot

    def _take_places(
        self,
        marked: list[int],
        raw: list[bytes],
        pieces: list[bytes],
        processes: list[ProcessSnapshot | None],
        run_at: list[int],
    ) -> None:
        old_processes, old_pieces, old_run_at = self._processes, self._pieces, self._run_at
        for i in marked:
            pid = int(raw[i])
            if i >= len(old_processes) or old_processes[i].pid != pid:
                raise UnknownPlace(
                    f"process {i + 1} (pid {pid}) is written as the one at its place "
                    "on the line before, which has no such process"
                )
            processes[i], pieces[i], run_at[i] = old_processes[i], old_pieces[i], old_run_at[i]

    def _decode_runs(
        self,
        pieces: list[bytes],
        missing: list[int],
        processes: list[ProcessSnapshot | None],
        run_at: list[int],
    ) -> list[int]:
        """Decode the processes at ``missing`` that have a process at their place
        on the line before and whose user, name and command line form a run (the
        module's notes): those of the process before when the runs are the same
        text, else read from the run.  Returns the places left to read whole (a
        line with no line before is read whole: it has nothing to take over)."""
        old_count = len(self._pieces)
        if not _RUNS or not old_count:
            return missing
        whole: list[int] = []
        for at in range(0, len(missing), _BATCH):
            self._decode_run_batch(pieces, missing[at : at + _BATCH], processes, run_at, whole)
        return whole

    def _decode_run_batch(
        self,
        pieces: list[bytes],
        batch: list[int],
        processes: list[ProcessSnapshot | None],
        run_at: list[int],
        whole: list[int],
    ) -> None:
        old_pieces, old_processes, old_run_at = self._pieces, self._processes, self._run_at
        old_count = len(old_pieces)
        places: list[int] = []  # read as a rest and a run...
        starts: list[int] = []
        rests: list[bytes] = []
        runs: list[bytes | None] = []  # ...None: the run of the process before
        for i in batch:
            piece = pieces[i]
            start = piece.find(_RUN_START)
            if start <= 0 or i >= old_count:
                whole.append(i)
                continue
            end = piece.find(_RUN_END, start)
            head = piece[:start]
            if end < 0 or b"{" in head or b"[" in head:
                whole.append(i)
                continue
            run = piece[start:end]
            at = old_run_at[i]
            places.append(i)
            starts.append(start)
            rests.append(head + piece[end:])
            # the same text up to the key after it: the same run (each ends at the
            # first such key after its start)
            if (
                at
                and old_pieces[i].startswith(run, at)
                and old_pieces[i].startswith(_RUN_END, at + len(run))
            ):
                runs.append(None)
            else:
                runs.append(run[1:])
        if not places:
            return
        fresh = [k for k, run in enumerate(runs) if run is not None]
        try:
            values = load_objects(rests, _FIRST, b"}")
            run_values = load_objects([runs[k] for k in fresh], b"{", b"}")  # type: ignore[misc]
        except ValueError:  # read whole: the same error as the whole piece, or none
            whole.extend(places)
            return
        by_place = dict(zip(fresh, run_values, strict=True))
        convert = converter_of(ProcessSnapshot)
        for k, (i, value) in enumerate(zip(places, values, strict=True)):
            if "user" in value or "name" in value or "cmdline" in value:
                whole.append(i)
                continue
            run_value = by_place.get(k)
            if run_value is None:
                process = convert(value)
                before = old_processes[i]
                attributes = vars(process)
                attributes["user"] = before.user
                attributes["name"] = before.name
                attributes["cmdline"] = before.cmdline
            elif run_value.keys() <= _RUN_KEYS:
                value.update(run_value)
                process = convert(value)
            else:
                whole.append(i)
                continue
            processes[i] = process
            run_at[i] = starts[k]

    def _known_by_text(self) -> dict[bytes, int]:
        """The places of the previous line's processes by their text (built when
        a process moved, the first time it is needed)."""
        if self._known is None:
            self._known = {piece: at for at, piece in enumerate(self._pieces)}
        return self._known


#: runs are taken over only where the converter fills a process's attributes
#: directly (a plain dataclass: see gputui.snapshot.codec.dataclass_plan)
_RUNS = dataclass_plan(ProcessSnapshot).defaults is not None
