"""Call a running ``bertembed serve`` the ways its users do: OpenAI's SDK, plain HTTP, TEI's route.

Usage::

    python client.py [URL] [--model NAME] [--api-key KEY]

URL defaults to http://127.0.0.1:8080. Each way embeds the same two texts;
the script prints the first numbers of each vector and checks that every
way gives the same vectors. ``openai`` is used when it is installed
(``pip install openai``); the other two need only the standard library.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import urllib.request
from typing import Any

TEXTS = ["The cat sat on the mat.", "Ein Hund schläft."]


def post(url: str, body: dict[str, Any], api_key: str | None) -> Any:
    """POST a JSON body and return the decoded answer."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def with_openai_sdk(base: str, model: str, api_key: str | None) -> list[list[float]] | None:
    """OpenAI's Python SDK pointed at the server (None when the SDK is not installed)."""
    try:
        from openai import OpenAI
    except ImportError:
        return None
    client = OpenAI(base_url=f"{base}/v1", api_key=api_key or "unused")
    return [d.embedding for d in client.embeddings.create(input=TEXTS, model=model).data]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:8080")
    parser.add_argument("--model", help="the model name (default: the server's, from GET /v1/models)")
    parser.add_argument("--api-key", default=os.environ.get("BERTEMBED_API_KEY"))
    args = parser.parse_args()
    base = args.url.rstrip("/")
    model = args.model
    if model is None:
        request = urllib.request.Request(f"{base}/v1/models")
        if args.api_key:
            request.add_header("Authorization", f"Bearer {args.api_key}")
        with urllib.request.urlopen(request, timeout=60) as answer:
            model = json.loads(answer.read())["data"][0]["id"]
    openai_answer = post(f"{base}/v1/embeddings", {"input": TEXTS, "model": model}, args.api_key)
    ways = {
        "OpenAI route, plain HTTP": [d["embedding"] for d in openai_answer["data"]],
        "TEI route": post(f"{base}/embed", {"inputs": TEXTS}, args.api_key),
    }
    sdk = with_openai_sdk(base, model, args.api_key)
    if sdk is not None:
        ways["OpenAI SDK"] = sdk
    first = next(iter(ways.values()))
    for name, vectors in ways.items():
        print(f"{name}: {len(vectors)} vectors of {len(vectors[0])}, first {[round(v, 4) for v in vectors[0][:3]]}")
        for a, b in zip(vectors, first, strict=True):
            if not all(math.isclose(x, y, rel_tol=0, abs_tol=1e-6) for x, y in zip(a, b, strict=True)):
                raise SystemExit(f"{name} differs from the first way")
    print(f"model {model}: every way gives the same vectors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
