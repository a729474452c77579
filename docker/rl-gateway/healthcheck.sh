#!/bin/bash
# The image's HEALTHCHECK: GET /healthz on the admin listener must answer 200. Bash's
# /dev/tcp does the request, so the image needs no HTTP client. RL_ADMIN_PORT names the
# port when [server] admin_listen is not on 9090.
set -eu
exec 3<>"/dev/tcp/127.0.0.1/${RL_ADMIN_PORT:-9090}"
printf 'GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
IFS=' ' read -r -t 2 _version status _reason <&3
[ "$status" = 200 ]
