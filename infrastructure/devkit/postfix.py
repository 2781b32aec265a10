"""A private Postfix 3.7 on loopback, for tests, benchmarks and the demo: submission with
SASL from a private Dovecot, delivery into that Dovecot by LMTP (the facts behind every
setting here were measured on these machines).

Debian's ``postfix`` conflicts with the installed exim4 (both provide
mail-transport-agent), so it is never installed: ``postfix_root()`` fetches ``postfix`` and
``dovecot-lmtpd`` with ``apt-get download`` (Debian's package registry only) and unpacks
them with ``dpkg -x`` into a cache directory, once per machine. Dovecot runs the unpacked
``lmtp`` binary as its ``service lmtp`` executable (``dovecot_config``).

Usage::

    lmtp_port = free_port()
    with DovecotServer(extra_config=dovecot_config(lmtp_port)) as dovecot:
        with PostfixServer(dovecot, lmtp_port) as postfix:
            postfix.submission_port  # STARTTLS, AUTH PLAIN/LOGIN after it
            postfix.smtps_port       # implicit TLS
            postfix.ca_file          # trust this to verify the server's certificate
            postfix.message_ids()    # one per DATA whose header cleanup read
            postfix.accepted_ids()   # one per message taken into the queue

``smtpd_options`` adds ``-o`` options to both submission services (e.g. an
``smtpd_end_of_data_restrictions`` policy service that timestamps each accepted DATA).

Invariants: everything lives in one temp dir (configuration, queue, log, keys); the
server listens on 127.0.0.1 only and relays nowhere (``default_transport = error``);
``example.test`` is the only domain, ``NAME@example.test`` delivered to Dovecot's
``NAME`` (any name: Dovecot's LMTP refuses, and Postfix bounces, one it does not know).
As root the daemons run as ``mail``/``nobody``/``daemon``.
"""

from __future__ import annotations

import datetime
import grp
import ipaddress
import os
import pwd
import re
import shutil
import smtplib
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from infrastructure.devkit.debs import unpack_once
from infrastructure.devkit.dovecot import DovecotServer
from infrastructure.devkit.processes import free_port, terminate_group

PACKAGES = ("postfix", "dovecot-lmtpd")
DOMAIN = "example.test"
_CACHE = Path(os.environ.get("TIDINGS_POSTFIX_ROOT", "/var/tmp/tidings-postfix-3.7"))  # noqa: S108 - a cache
_READY_TIMEOUT = 20.0
_QUEUE_DIRS = (
    "active",
    "bounce",
    "corrupt",
    "defer",
    "deferred",
    "flush",
    "hold",
    "incoming",
    "private",
    "saved",
    "trace",
)


class PostfixError(RuntimeError):
    pass


def postfix_root(cache: Path = _CACHE) -> Path:
    """The unpacked packages (downloaded once); raises ``PostfixError`` when impossible."""
    if (cache / "usr/lib/postfix/sbin/master").exists() and (
        cache / "usr/lib/dovecot/lmtp"
    ).exists():
        return cache
    return unpack_once(cache, PACKAGES, PostfixError)


def dovecot_config(lmtp_port: int) -> str:
    """Dovecot's lines for Postfix: LMTP on ``lmtp_port`` (the unpacked binary), the SASL
    socket ``auth-postfix``, and ``user@example.test`` mapped to the bare user name."""
    lmtp = postfix_root() / "usr/lib/dovecot/lmtp"
    return f"""
protocols = imap lmtp
auth_username_format = %Ln
postmaster_address = postmaster@{DOMAIN}
service lmtp {{
  executable = {lmtp}
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp_port}
  }}
}}
service auth {{
  unix_listener auth-postfix {{
    mode = 0666
  }}
}}
"""


def _tls_files(directory: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 signed by it; answers the CA's path."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tidings test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "cert.pem").write_bytes(cert.public_bytes(pem))
    (directory / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (directory / "key.pem").chmod(0o600)
    return directory / "ca.pem"


MASTER_CF = """\
{submission} inet n - n - - smtpd {smtpd_options}
{smtps} inet n - n - - smtpd {smtpd_options} -o smtpd_tls_wrappermode=yes
cleanup unix n - n - 0 cleanup
qmgr unix n - n 300 1 qmgr
tlsmgr unix - - n 1000? 1 tlsmgr
rewrite unix - - n - - trivial-rewrite
bounce unix - - n - 0 bounce
defer unix - - n - 0 bounce
trace unix - - n - 0 bounce
verify unix - - n - 1 verify
flush unix n - n 1000? 0 flush
proxymap unix - - n - - proxymap
smtp unix - - n - - smtp
relay unix - - n - - smtp
showq unix n - n - - showq
error unix - - n - - error
retry unix - - n - - error
discard unix - - n - - discard
lmtp unix - - n - - lmtp
anvil unix - - n - 1 anvil
scache unix - - n - 1 scache
postlog unix-dgram n - n - 1 postlogd
"""

SMTPD_OPTIONS = (
    "-o smtpd_tls_security_level=encrypt -o smtpd_sasl_auth_enable=yes"
    " -o smtpd_tls_auth_only=yes"
    " -o smtpd_client_restrictions=permit_sasl_authenticated,reject"
    " -o smtpd_relay_restrictions=reject_unauth_destination"
)

MAIN_CF = """\
compatibility_level = 3.6
config_directory = {conf}
queue_directory = {queue}
data_directory = {data}
daemon_directory = {pf}/usr/lib/postfix/sbin
command_directory = {pf}/usr/sbin
shlib_directory = {pf}/usr/lib/postfix
meta_directory = {pf}/etc/postfix
mail_owner = mail
default_privs = nobody
setgid_group = daemon
myhostname = postfix.{domain}
mydomain = {domain}
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
biff = no
maillog_file = {d}/postfix.log
maillog_file_prefixes = {d}
import_environment = MAIL_CONFIG MAIL_DEBUG MAIL_LOGTAG TZ LANG=C
  LD_LIBRARY_PATH={pf}/usr/lib/postfix
virtual_mailbox_domains = {domain}
virtual_mailbox_maps = static:x
virtual_transport = lmtp:inet:127.0.0.1:{lmtp_port}
default_transport = error:no relay from the test server
relay_transport = error:no relay from the test server
smtpd_tls_cert_file = {d}/cert.pem
smtpd_tls_key_file = {d}/key.pem
smtpd_sasl_type = dovecot
smtpd_sasl_path = {sasl_path}
header_checks = regexp:{conf}/header_checks
message_size_limit = 10240000
smtputf8_enable = no
"""


class PostfixServer:
    host = "127.0.0.1"

    def __init__(self, dovecot: DovecotServer, lmtp_port: int, smtpd_options: str = "") -> None:
        self._dovecot = dovecot
        self._smtpd_options = f"{SMTPD_OPTIONS} {smtpd_options}".strip()
        self._lmtp_port = lmtp_port
        self.dir: Path | None = None
        self.ca_file: Path | None = None
        self.submission_port = 0
        self.smtps_port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., PostfixServer] | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        pf = postfix_root()
        shm = "/dev/shm"  # noqa: S108 - a private mkdtemp inside
        base = shm if os.path.isdir(shm) else None
        d = Path(tempfile.mkdtemp(prefix="tpf-", dir=base))
        d.chmod(0o755)
        self.dir = d
        conf, queue, data = d / "conf", d / "queue", d / "data"
        conf.mkdir()
        self.ca_file = _tls_files(d)
        self.submission_port, self.smtps_port = free_port(), free_port()
        assert self._dovecot.root is not None
        (conf / "main.cf").write_text(
            MAIN_CF.format(
                conf=conf,
                queue=queue,
                data=data,
                pf=pf,
                d=d,
                domain=DOMAIN,
                lmtp_port=self._lmtp_port,
                sasl_path=self._dovecot.root / "run" / "auth-postfix",
            )
        )
        (conf / "master.cf").write_text(
            MASTER_CF.format(
                submission=f"127.0.0.1:{self.submission_port}",
                smtps=f"127.0.0.1:{self.smtps_port}",
                smtpd_options=self._smtpd_options,
            )
        )
        (conf / "header_checks").write_text("/^(Resent-)?Bcc:/ WARN bcc header\n")
        self._make_queue(queue, data)
        self._spawn()
        return self

    def _make_queue(self, queue: Path, data: Path) -> None:
        root = os.geteuid() == 0
        mail = pwd.getpwnam("mail") if root else None
        queue.mkdir(mode=0o755)
        for name in _QUEUE_DIRS:
            (queue / name).mkdir(mode=0o700)
        (queue / "maildrop").mkdir(mode=0o730)
        (queue / "public").mkdir(mode=0o710)
        (queue / "pid").mkdir(mode=0o755)
        data.mkdir(mode=0o700)
        if mail is not None:
            setgid = grp.getgrnam("daemon").gr_gid
            for name in _QUEUE_DIRS:
                os.chown(queue / name, mail.pw_uid, mail.pw_gid)
            for name in ("maildrop", "public"):
                os.chown(queue / name, mail.pw_uid, setgid)
            os.chown(data, mail.pw_uid, mail.pw_gid)

    def _spawn(self) -> None:
        assert self.dir is not None
        pf = postfix_root()
        env = {**os.environ, "LD_LIBRARY_PATH": str(pf / "usr/lib/postfix"), "LANG": "C"}
        self._proc = subprocess.Popen(  # noqa: S603 - fixed argv
            [str(pf / "usr/lib/postfix/sbin/master"), "-c", str(self.dir / "conf"), "-d"],
            cwd=self.dir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._finalizer = weakref.finalize(self, terminate_group, self._proc)
        deadline = time.monotonic() + _READY_TIMEOUT
        while not self._greets():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                log = self.log()[-2000:]
                self.stop()
                raise PostfixError(f"Postfix master did not start: {log}")
            time.sleep(0.05)

    def _greets(self) -> bool:
        try:
            with smtplib.SMTP(self.host, self.submission_port, timeout=1) as client:
                return client.noop()[0] == 250
        except (OSError, smtplib.SMTPException):
            return False

    def halt(self) -> None:
        """Stop every Postfix process, keeping configuration and queue (a restart)."""
        if self._finalizer is not None:
            self._finalizer.detach()
        terminate_group(self._proc)
        self._proc = None

    def resume(self) -> None:
        self._spawn()

    def stop(self) -> None:
        self.halt()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def log(self) -> str:
        if self.dir is None:
            return ""
        try:
            return (self.dir / "postfix.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def message_ids(self) -> list[str]:
        """The Message-ID of every message whose header cleanup read, in order (one per
        DATA, also one whose end of data never came)."""
        return re.findall(r"cleanup\[\d+\]: \w+: message-id=(<[^>]*>)", self.log())

    def accepted_ids(self) -> list[str]:
        """The Message-ID of every message Postfix accepted, in order: the queue manager
        took its queue file, which exists only after the end of data (qmgr logs it a
        moment after the ``250``)."""
        log = self.log()
        queued = set(re.findall(r"qmgr\[\d+\]: (\w+): from=<", log))
        read = re.findall(r"cleanup\[\d+\]: (\w+): message-id=(<[^>]*>)", log)
        return [message_id for queue_id, message_id in read if queue_id in queued]

    def connections(self) -> int:
        """How many SMTP connections the submission services accepted (its own readiness
        probes included)."""
        return len(re.findall(r"smtpd\[\d+\]: connect from ", self.log()))

    def bcc_warnings(self) -> int:
        """How many messages came in with a Bcc header (cleanup removes it)."""
        return len(re.findall(r"warning: header (?:Resent-)?Bcc:", self.log()))
