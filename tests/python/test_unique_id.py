"""UniqueId: bytes, equality, pickling, and the documented layout (docs/bootstrap.md)."""

import pickle
import struct

import pytest

import meshcomm
from meshcomm import TcpBootstrap, UniqueId


def test_round_trip_through_bytes_and_pickle():
    uid = TcpBootstrap.create_unique_id(2)
    data = bytes(uid)
    assert len(data) == 128
    assert data[:7] == b"meshcid"
    assert UniqueId(data) == uid and UniqueId.from_bytes(data) == uid
    assert hash(UniqueId(data)) == hash(uid)
    restored = pickle.loads(pickle.dumps(uid))
    assert isinstance(restored, UniqueId) and bytes(restored) == data
    assert TcpBootstrap.create_unique_id(2) != uid  # fresh secret and port


def test_repr_hides_the_secret():
    uid = TcpBootstrap.create_unique_id(1)
    secret = bytes(uid)[8:24]
    assert secret.hex() not in repr(uid)
    assert repr(uid) == "<meshcomm.UniqueId: 128 bytes, secret hidden>"


def test_address_id_layout():
    secret = bytes(range(16))
    uid = TcpBootstrap.unique_id_from_address("127.0.0.1:29501", secret)
    data = bytes(uid)
    assert data[:8] == b"meshcid0"  # '0': rank 0 hosts the root
    assert data[8:24] == secret
    assert struct.unpack("<H", data[24:26])[0] == 2  # AF_INET
    assert struct.unpack(">H", data[26:28])[0] == 29501
    assert data[28:32] == bytes([127, 0, 0, 1])
    assert data[44:] == bytes(84)


def test_wrong_lengths_are_errors():
    with pytest.raises(meshcomm.InvalidUsageError, match=r"^invalid usage: UniqueId: expected 128 bytes, got 127$"):
        UniqueId(b"\0" * 127)
    with pytest.raises(meshcomm.InvalidUsageError, match="the secret must be 16 bytes, got 3"):
        TcpBootstrap.unique_id_from_address("127.0.0.1:29501", b"abc")
