#!/usr/bin/env python3
"""Creates a blob container in Azurite (or any Azure Blob endpoint) unless it exists.

    scripts/azurite-container.py ENDPOINT ACCOUNT KEY CONTAINER
    e.g. http://127.0.0.1:10000/devstoreaccount1 devstoreaccount1 <base64 key> distlock

services.sh uses it for `az`: creating a container needs a SharedKey-signed request, which curl
cannot make (no Azure signing), so it is signed here with the standard library only. Exit 0 when
the container was created or was already there; otherwise the status and body go to stderr.
"""
import base64
import hashlib
import hmac
import http.client
import sys
import urllib.parse
from email.utils import formatdate

API_VERSION = "2021-12-02"


def main():
    endpoint, account, key, container = sys.argv[1:5]
    url = urllib.parse.urlsplit(endpoint.rstrip("/") + "/" + container)
    headers = {
        "x-ms-date": formatdate(usegmt=True),
        "x-ms-version": API_VERSION,
        "Content-Length": "0",
    }
    # SharedKey string to sign (Blob service, version 2015-02-21 and later): verb, eleven
    # standard headers (all empty here, Content-Length too as it is 0), the x-ms-* headers, then
    # /ACCOUNT + the URL path (which holds the account again on a path-style endpoint such as
    # Azurite's) and the query parameters.
    canonical_headers = "".join(
        f"{k.lower()}:{v}\n" for k, v in sorted(headers.items()) if k.lower().startswith("x-ms-")
    )
    resource = f"/{account}{url.path}\nrestype:container"
    to_sign = "PUT\n" + "\n" * 11 + canonical_headers + resource
    sig = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
    headers["Authorization"] = f"SharedKey {account}:{base64.b64encode(sig).decode()}"
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=10)
    conn.request("PUT", url.path + "?restype=container", headers=headers)
    resp = conn.getresponse()
    body = resp.read().decode(errors="replace")
    if resp.status == 201:
        print(f"container {container} created", file=sys.stderr)
    elif resp.status == 409 and "ContainerAlreadyExists" in body:
        pass
    else:
        print(f"creating container {container}: HTTP {resp.status}\n{body}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
