"""Shared pieces of nodesmith's node bootstrap generators (standard library only).

The agent's configuration is rendered with the agent's real option names (`nodesmith-agent
--help`); values are checked before they are written, so a bad input fails here, at launch time,
and never as a node that cannot start its agent.
"""
import re

# EC2 caps user data at 16 KiB before base64.
USER_DATA_MAX = 16 * 1024

_SAFE_VALUE = re.compile(r"^[^\r\n#]*$")
_TOKEN = re.compile(r"^[!-~]{16,511}$")
_COORDINATOR = re.compile(r"^tls\+tcp[46]?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^tls\+tcp[46]?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----\r?\n?")


class BootstrapError(ValueError):
    """Bad input: the message names the option."""


def check_token(token):
    token = token.strip()
    if not _TOKEN.match(token):
        raise BootstrapError("token: 16 to 511 printable ASCII characters, no spaces")
    return token


def check_ca(pem):
    if not isinstance(pem, str):
        pem = pem.decode("ascii", "strict")
    if not _PEM_CERT.search(pem):
        raise BootstrapError("coordinator CA: not a PEM certificate")
    return pem if pem.endswith("\n") else pem + "\n"


def check_coordinator(address):
    if not _COORDINATOR.match(address):
        raise BootstrapError("coordinator: expected tls+tcp://HOST:PORT, got %r" % address)
    return address


def render_agent_conf(settings):
    """settings: ordered (key, value) pairs with the agent's option names; None values are
    skipped. Returns the text of agent.conf."""
    lines = ["# Written by nodesmith's node bootstrap (user data); `nodesmith-agent --help` lists every key."]
    for key, value in settings:
        if value is None:
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no"
        value = str(value)
        if not _SAFE_VALUE.match(value) or value != value.strip():
            raise BootstrapError("%s: value %r cannot be written as one 'key = value' line" % (key, value))
        lines.append("%s = %s" % (key, value))
    return "\n".join(lines) + "\n"


def parse_label(text):
    if "=" not in text:
        raise BootstrapError("label %r: expected KEY=VALUE" % text)
    key, value = text.split("=", 1)
    if not key or "," in key or "," in value:
        raise BootstrapError("label %r: expected KEY=VALUE" % text)
    return key, value


def parse_taint(text):
    """KEY[=VALUE]:EFFECT, as kubectl taint writes them."""
    m = re.match(r"^([^=:\s]+)(?:=([^:\s]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$", text)
    if not m:
        raise BootstrapError("taint %r: expected KEY[=VALUE]:NoSchedule|PreferNoSchedule|NoExecute" % text)
    return {"key": m.group(1), "value": m.group(2) or "", "effect": m.group(3)}
