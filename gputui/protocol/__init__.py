"""Wire protocol between the in-job hook and its viewers (stdlib only).

Imported by the hook inside training jobs, so it must never import anything
outside the standard library.  ``messages`` holds the vocabulary (types, phases,
step flags, capture states), ``schema``/``capture`` the typed messages,
``wire`` decoding, ``framing`` the frames, ``paths`` the private socket paths.

The names below load their module on first use (PEP 562): a process that
reads only the typed messages (``gputui analyze``, the analyzer) does not pay
for the socket and framing modules.
"""

from __future__ import annotations

import importlib
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

#: each name of the package and the module that defines it
_HOME = {
    "SchemaError": "fields",
    "MAX_FRAME": "framing",
    "FrameError": "framing",
    "FrameReader": "framing",
    "encode": "framing",
    "encode_obj": "framing",
    "PROTOCOL_VERSION": "messages",
    "SocketDirError": "paths",
    "current_uid": "paths",
    "ensure_private_dir": "paths",
    "find_socket": "paths",
    "hooked_pids": "paths",
    "list_sockets": "paths",
    "peer_uid": "paths",
    "socket_dirs": "paths",
    "socket_path": "paths",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


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
