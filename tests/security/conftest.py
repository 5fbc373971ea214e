"""A private Mosquitto started from the shipped config and ACL, with one user per role."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.security.mqtt_acl_helpers import USERS, AclBroker, free_port, render_config


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    if shutil.which("mosquitto") is None or shutil.which("mosquitto_passwd") is None:
        pytest.skip("mosquitto is not installed")
    workdir = tmp_path_factory.mktemp("mosquitto")
    port = free_port()
    conf = render_config(workdir, port)
    log = workdir / "broker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["mosquitto", "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 10
        while True:  # readiness: the port accepts connections
            if proc.poll() is not None:
                pytest.fail(f"mosquitto exited: {log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("mosquitto did not start")
                time.sleep(0.02)
        yield AclBroker("127.0.0.1", port, dict(USERS), log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
