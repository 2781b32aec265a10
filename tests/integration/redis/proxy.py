"""A tiny TCP proxy in front of the shared Redis: stopping it looks, to a client, like Redis
going away (connections cut, then refused); starting it again on the same port brings
it back; freezing it drops every byte but keeps the connections open, like a dead
network path. Lets a test take "Redis" away without touching the server others share."""

from __future__ import annotations

from tests.support.blackhole_proxy import BlackholeProxy


class TcpProxy(BlackholeProxy):
    def __init__(self, target: tuple[str, int], db: int = 0) -> None:
        super().__init__(target)
        self.db = db

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/{self.db}"

    @property
    def frozen(self) -> bool:
        """True: connections stay open but every byte is dropped."""
        return self.holed

    @frozen.setter
    def frozen(self, value: bool) -> None:
        if value:
            self.blackhole()
        else:
            self.restore()
