from application.mail.ports import MessageRef
from infrastructure.imap.plan import plan_page, uid_windows
from infrastructure.imap.settings import ImapAdapterSettings

S = ImapAdapterSettings(
    stream_threshold_bytes=100,
    max_message_bytes=1000,
    max_batch_bytes=250,
    fetch_group_bytes=120,
)


def ref(uid: int, size: int) -> MessageRef:
    return MessageRef(uid=uid, provider_message_id=f"fp:{uid}", size=size, internal_date=None)


def test_sorts_messages_into_inline_streamed_and_too_large() -> None:
    plan = plan_page([ref(1, 50), ref(2, 500), ref(3, 5000), ref(4, 60)], S)
    assert [r.uid for r in plan.included] == [1, 2, 3, 4]
    assert plan.inline_groups == [[1, 4]]
    assert plan.streamed == [2]
    assert plan.too_large == [3]
    assert not plan.cut


def test_groups_inline_fetches_by_bytes() -> None:
    plan = plan_page([ref(1, 60), ref(2, 60), ref(3, 60)], S)
    assert plan.inline_groups == [[1, 2], [3]]


def test_cuts_the_page_when_inline_bytes_pass_the_budget() -> None:
    plan = plan_page([ref(1, 100), ref(2, 100), ref(3, 100), ref(4, 10)], S)
    assert [r.uid for r in plan.included] == [1, 2]
    assert plan.cut


def test_streamed_and_too_large_do_not_count_against_the_budget() -> None:
    plan = plan_page([ref(1, 100), ref(2, 900), ref(3, 9000), ref(4, 100)], S)
    assert [r.uid for r in plan.included] == [1, 2, 3, 4]
    assert not plan.cut


def test_always_keeps_one_message() -> None:
    s = ImapAdapterSettings(stream_threshold_bytes=100, max_batch_bytes=10)
    plan = plan_page([ref(1, 90), ref(2, 90)], s)
    assert [r.uid for r in plan.included] == [1]
    assert plan.cut


def test_uid_windows() -> None:
    assert uid_windows(11, 11, 100) == []  # UIDNEXT says nothing new: no round trip
    assert uid_windows(11, 12, 100) == [(11, None)]
    assert uid_windows(1, None, 100) == [(1, None)]
    assert uid_windows(1, 251, 100) == [(1, 100), (101, 200), (201, None)]
    assert uid_windows(1, 201, 100) == [(1, 100), (101, None)]
