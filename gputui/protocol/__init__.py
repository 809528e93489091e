"""Wire protocol between the in-job hook and its viewers (stdlib only).

Imported by the hook inside training jobs, so it must never import anything
outside the standard library.  ``messages`` holds the vocabulary (types, phases,
step flags, capture states), ``schema``/``capture`` the typed messages, ``spec``
the wire form their fields declare, ``wire`` decoding, ``framing`` the frames,
``paths`` the private socket paths.

The names below load their module on first use (PEP 562): a process that
reads only the typed messages (``gputui analyze``, the analyzer) does not pay
for the socket and framing modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputui.protocol.fields import SchemaError
    from gputui.protocol.framing import MAX_FRAME, FrameError, FrameReader, encode, encode_obj
    from gputui.protocol.messages import PROTOCOL_VERSION
    from gputui.protocol.paths import (
        SocketDirError,
        current_uid,
        ensure_private_dir,
        find_socket,
        hooked_pids,
        list_sockets,
        peer_uid,
        socket_dirs,
        socket_path,
    )


#: what ``paths`` lends the package's namespace
_PATHS_NAMES = frozenset(
    {"SocketDirError", "current_uid", "ensure_private_dir", "find_socket", "hooked_pids"}
    | {"list_sockets", "peer_uid", "socket_dirs", "socket_path"}
)


def __getattr__(name: str) -> Any:
    # each module by an import statement of its own, so that a reader and the
    # import contracts see it
    if name == "SchemaError":
        from gputui.protocol import fields

        return getattr(fields, name)
    if name in ("MAX_FRAME", "FrameError", "FrameReader", "encode", "encode_obj"):
        from gputui.protocol import framing

        return getattr(framing, name)
    if name == "PROTOCOL_VERSION":
        from gputui.protocol import messages

        return getattr(messages, name)
    if name in _PATHS_NAMES:
        from gputui.protocol import paths

        return getattr(paths, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "FrameError",
    "FrameReader",
    "SchemaError",
    "SocketDirError",
    "current_uid",
    "encode",
    "encode_obj",
    "ensure_private_dir",
    "find_socket",
    "hooked_pids",
    "list_sockets",
    "peer_uid",
    "socket_dirs",
    "socket_path",
]
