"""Where proposals come from: an OpenAI-compatible chat endpoint, or a recorded transcript (test double).

The API key is read from a flag or the environment and is only ever put in the Authorization header:
it is not stored in transcripts, reprs or error messages.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

ENV_URL, ENV_MODEL, ENV_KEY = "POLYREC_LLM_URL", "POLYREC_LLM_MODEL", "POLYREC_LLM_API_KEY"


class ProviderError(RuntimeError):
    """The provider could not produce a proposal."""


class Provider(Protocol):
    def complete(self, messages: list[dict[str, str]]) -> str:
        """The assistant's reply to a chat (list of {"role", "content"})."""
        ...

    def describe(self) -> str:
        """Name for reports and transcripts (never the key)."""
        ...


@dataclass(kw_only=True, slots=True)
class OpenAICompatibleProvider:
    """POST {url}/chat/completions as the OpenAI API defines it (vLLM, llama.cpp, SGLang serve it too)."""

    url: str  # base URL, e.g. http://127.0.0.1:8000/v1
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 120.0  # per request, seconds
    temperature: float = 0.2

    @classmethod
    def from_env(cls, url: str | None = None, model: str | None = None,
                 api_key: str | None = None) -> OpenAICompatibleProvider | None:
        """Flags first, then POLYREC_LLM_URL / POLYREC_LLM_MODEL / POLYREC_LLM_API_KEY; None without a URL."""
        url = url or os.environ.get(ENV_URL)
        if not url:
            return None
        model = model or os.environ.get(ENV_MODEL)
        if not model:
            raise ProviderError(f"an LLM URL is set but no model: pass --model or set {ENV_MODEL}")
        return cls(url=url, model=model, api_key=api_key or os.environ.get(ENV_KEY))

    def describe(self) -> str:
        return f"openai-compatible {self.url} model={self.model}"

    def complete(self, messages: list[dict[str, str]]) -> str:
        body = json.dumps({"model": self.model, "messages": messages, "temperature": self.temperature}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url.rstrip("/") + "/chat/completions", data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise ProviderError(f"{self.describe()}: HTTP {exc.code} {exc.reason}") from None
        # URLError and TimeoutError are OSErrors; a connection the endpoint drops mid-reply raises an OSError
        # (ConnectionResetError, RemoteDisconnected) or http.client's IncompleteRead, not wrapped by urllib
        except (OSError, http.client.HTTPException, ValueError) as exc:  # ValueError: not JSON, not UTF-8
            raise ProviderError(f"{self.describe()}: {type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ProviderError(f"{self.describe()}: reply has no choices[0].message.content") from None
        if not isinstance(content, str):
            reason = payload["choices"][0].get("finish_reason") if isinstance(payload["choices"][0], dict) else None
            raise ProviderError(f"{self.describe()}: choices[0].message.content is {type(content).__name__}, "
                                f"not text (finish_reason: {reason})")
        return content


@dataclass(kw_only=True, slots=True)
class RecordedTranscriptProvider:
    """Test double: replays the assistant replies of a recorded transcript, in order."""

    replies: list[str]
    name: str = "recorded-transcript"
    calls: list[list[dict[str, str]]] = field(default_factory=list)  # the chats it was sent

    @classmethod
    def from_file(cls, path: Path) -> RecordedTranscriptProvider:
        """A JSON list of strings, or a port transcript (JSON lines with a "response" field)."""
        text = path.read_text()
        if text.lstrip().startswith("["):
            return cls(replies=list(json.loads(text)), name=f"recorded-transcript {path.name}")
        return cls(replies=[json.loads(line)["response"] for line in text.splitlines() if line.strip()],
                   name=f"recorded-transcript {path.name}")

    def describe(self) -> str:
        return self.name

    def complete(self, messages: list[dict[str, str]]) -> str:
        self.calls.append([dict(m) for m in messages])
        if len(self.calls) > len(self.replies):
            raise ProviderError(f"{self.name}: only {len(self.replies)} recorded replies")
        return self.replies[len(self.calls) - 1]
