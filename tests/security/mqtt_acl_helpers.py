"""Helpers for the MQTT ACL tests: the shipped Mosquitto config rendered for a test."""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto"
USERS = {
    "guard": "guard-pw-1",
    "explainer": "explainer-pw-2",
    "line": "line-pw-3",
    "monitor": "monitor-pw-4",
}
_DROP = ("persistence", "autosave", "log_dest", "pid_file")


@dataclass(frozen=True)
class AclBroker:
    host: str
    port: int
    users: dict[str, str]
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def render_config(workdir: Path, port: int) -> Path:
    """The deploy config with this test's password and ACL files and its listener on
    ``port``. (Not ``-p PORT`` with no listener in the file: Mosquitto 2.0 then runs in
    "local only mode", which let an anonymous client connect despite
    ``allow_anonymous false``; the test must exercise the config as deployed.)"""
    passwd = workdir / "passwd"
    for i, (user, pw) in enumerate(USERS.items()):
        create = ["-c"] if i == 0 else []
        subprocess.run(["mosquitto_passwd", "-b", *create, str(passwd), user, pw], check=True)
    passwd.chmod(0o600)
    acl = workdir / "rtgate.acl"
    shutil.copy(DEPLOY / "rtgate.acl", acl)
    lines = []
    for line in (DEPLOY / "mosquitto.conf").read_text().splitlines():
        word = line.split(" ", 1)[0]
        if word == "password_file":
            line = f"password_file {passwd}"
        elif word == "acl_file":
            line = f"acl_file {acl}"
        elif word == "listener":
            line = f"listener {port} 127.0.0.1"
        elif word.startswith(_DROP):
            continue
        lines.append(line)
    # started as root, mosquitto would switch to user "mosquitto", who cannot read tmp files
    lines.append(f"user {getpass.getuser()}")
    conf = workdir / "mosquitto.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf
