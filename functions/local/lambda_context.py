"""A stand-in for the Lambda context object, for handlers invoked in process."""

from __future__ import annotations

import time

from functions.local.events import invocation_id


class LocalContext:
    def __init__(self, function_name: str, timeout_s: float = 30.0, memory_mb: int = 512) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        rid = invocation_id()  # formatted as a uuid, as Lambda's are
        self.aws_request_id = f"{rid[:8]}-{rid[8:12]}-{rid[12:16]}-{rid[16:20]}-{rid[20:]}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
