"""A keystore caught half-written by the certificate reload.

The broker only reads TLS files; tools that renew certificates may write them in
place, so a reload can see one torn, empty, garbage, missing for a moment, or a
directory. Each is one `tls_reload_failed` line and the previous certificates
stay in use; the finished file is loaded at the next check.
"""

from __future__ import annotations

import os
import random

import pytest

from broker.config.broker_config import BrokerConfig
from broker.net.tls import ServerTls, settings_for
from tests.tls_certs import CertificateAuthority


@pytest.mark.parametrize("damage", ["torn", "empty", "garbage", "missing", "directory"])
def test_a_damaged_keystore_keeps_the_previous_certificates(tmp_path, damage):
    keystore = tmp_path / "server.pem"
    CertificateAuthority().issue("localhost").write_pem(keystore)
    good = keystore.read_bytes()
    config = BrokerConfig.load(config_file=None, cli={}, data_dir=str(tmp_path / "data"), strict=False,
                               overrides=["native.listeners=SSL://127.0.0.1:0", "ssl.keystore.type=PEM",
                                          f"ssl.keystore.location={keystore}"])
    tls = ServerTls(settings_for(config.values, "SSL"), "native listener SSL")
    serving = tls.context.current
    if damage == "torn":
        keystore.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        keystore.write_bytes(b"")
    elif damage == "garbage":
        keystore.write_bytes(random.Random(0).randbytes(len(good)))
    elif damage == "missing":
        keystore.unlink()
    else:
        keystore.unlink()
        keystore.mkdir()
    assert tls.reload_if_changed() is False
    assert tls.context.current is serving
    if keystore.is_dir():
        keystore.rmdir()
    keystore.write_bytes(good)
    os.utime(keystore, ns=(1, 1))  # a change the next check sees whatever the clock's resolution
    assert tls.reload_if_changed() is True
    assert tls.context.current is not serving
