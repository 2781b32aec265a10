"""The private Dovecot's configuration: the packaged template and the lines it takes. Pure
(the template is read from the package).

``special_use_mailboxes`` gives every user the special-use folders; ``capability_setting``
renders ``imap_capability`` without the capabilities a test wants hidden, from the list
Dovecot 2.3.19 announces after login with this configuration (measured; 2.4 differs).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources

TEMPLATE_NAME = "dovecot.conf.tmpl"
SPECIAL_USE_FOLDERS = ("Sent", "Archive", "Drafts", "Junk", "Trash")
# What Dovecot 2.3.19 announces after login with this configuration (measured).
CAPABILITIES_2_3 = (
    "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE SORT SORT=DISPLAY THREAD=REFERENCES "
    "THREAD=REFS THREAD=ORDEREDSUBJECT MULTIAPPEND URL-PARTIAL CATENATE UNSELECT CHILDREN "
    "NAMESPACE UIDPLUS LIST-EXTENDED I18NLEVEL=1 CONDSTORE QRESYNC ESEARCH ESORT SEARCHRES "
    "WITHIN CONTEXT=SEARCH LIST-STATUS BINARY MOVE SNIPPET=FUZZY PREVIEW=FUZZY PREVIEW "
    "STATUS=SIZE SAVEDATE LITERAL+ NOTIFY SPECIAL-USE"
).split()


def default_config_template() -> str:
    """The packaged configuration template (``string.Template``; ``$extra`` takes added lines)."""
    return resources.files(__package__).joinpath(TEMPLATE_NAME).read_text()


class DovecotError(Exception):
    """The private Dovecot could not be started or driven."""


def capability_setting(hidden: Iterable[str]) -> str:
    """The ``imap_capability`` line announcing 2.3.19's capabilities but ``hidden`` (empty:
    no line, Dovecot's own list)."""
    hide = {c.upper() for c in hidden}
    unknown = hide - {c.upper() for c in CAPABILITIES_2_3}
    if unknown:
        raise DovecotError(f"not a capability this server announces: {sorted(unknown)}")
    if not hide:
        return ""
    return "imap_capability = " + " ".join(c for c in CAPABILITIES_2_3 if c.upper() not in hide)


def special_use_mailboxes() -> str:
    """The ``mailbox`` blocks of the inbox namespace: the special-use folders."""
    return "".join(
        f"  mailbox {name} {{\n    special_use = \\{name}\n    auto = subscribe\n  }}\n"
        for name in SPECIAL_USE_FOLDERS
    )
