"""The application layer: use cases, access rules, payload schemas and ports."""

from application.result import Error, Result
from application.users import SYSTEM_TENANT_ID, User

__all__ = ["SYSTEM_TENANT_ID", "Error", "Result", "User"]
