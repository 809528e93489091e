"""Wire protocol between the in-job hook and its viewers (stdlib only).

Imported by the hook inside training jobs, so it must never import anything
outside the standard library.  ``messages`` holds the vocabulary (types, phases,
step flags, capture states), ``schema``/``capture`` the typed messages,
``wire`` decoding, ``framing`` the frames, ``paths`` the private socket paths.
"""

from __future__ import annotations

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
