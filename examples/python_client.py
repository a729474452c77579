"""Rate-limit login attempts with RL.HIT from Python (redis-py).

Usage: python3 examples/python_client.py [port]   (default 6379)
"""
import sys

import redis


def check_login(client: redis.Redis, user: str) -> bool:
    """Counts one login attempt for `user`: at most 5 per minute."""
    # With RESP3 the reply is a map; with RESP2 the same five integers come as an array
    # [allowed, limit, remaining, reset_after_ms, retry_after_ms].
    reply = client.execute_command("RL.HIT", f"rl:login:{user}", 5, "1m")
    reply = {name.decode(): value for name, value in reply.items()}
    if reply["allowed"]:
        print(f"{user}: allowed, {reply['remaining']} of {reply['limit']} left")
    else:
        print(f"{user}: denied, retry in {reply['retry_after_ms']} ms")
    return bool(reply["allowed"])


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
    client = redis.Redis(host="127.0.0.1", port=port, protocol=3)
    for _ in range(6):
        check_login(client, "alice")


if __name__ == "__main__":
    main()
