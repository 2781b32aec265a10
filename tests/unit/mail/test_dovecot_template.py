from infrastructure.dovecot import DEFAULT_CONFIG_TEMPLATE
from tests.support.dovecot import TEMPLATE_PATH


def test_the_test_template_keeps_every_product_setting() -> None:
    """The demo's Dovecot (product template) and the tests' one must not drift apart."""
    test_lines = {ln.strip() for ln in TEMPLATE_PATH.read_text().splitlines()}
    product = [
        ln.strip()
        for ln in DEFAULT_CONFIG_TEMPLATE.splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    missing = [ln for ln in product if ln not in test_lines]
    assert missing == []
