from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # The SDKs run on asyncio; trio is not a target.
    return "asyncio"
