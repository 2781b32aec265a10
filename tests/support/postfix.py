"""The private Postfix for tests: ``infrastructure.devkit.postfix`` (the demo starts one
too)."""

from infrastructure.devkit.postfix import (
    DOMAIN,
    PostfixError,
    PostfixServer,
    dovecot_config,
    postfix_root,
)

__all__ = ["DOMAIN", "PostfixError", "PostfixServer", "dovecot_config", "postfix_root"]
