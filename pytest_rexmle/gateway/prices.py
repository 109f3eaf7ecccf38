"""USD for one model call, from ``genai-prices`` (a maintained price table that ships its data, so it
works offline; imported on first use since it costs a third of a second).

Why a reason and not a guess: an unknown model (a lab's own fine-tune behind vLLM) keeps its tokens in
the record and says why its cost is unknown, so a report never shows 0 USD for a run that spent money.
"""

from __future__ import annotations

from .. import protocols


def call_cost(protocol: str, model: str | None, input_tokens: int, output_tokens: int, cached_tokens: int,
              cache_write_tokens: int = 0) -> tuple[float | None, str | None]:
    """(USD, None), or (None, why the price is unknown). ``input_tokens`` includes cached input.

    The table is searched under the protocol's ``price_provider``, then by the model's name alone: an
    OpenAI-compatible endpoint may serve any provider's model (DeepSeek, Qwen, ...)."""
    if not model:
        return None, "the call named no model"
    try:
        import genai_prices as lib  # Python's import lock makes the first import thread-safe
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        return None, f"genai-prices is not importable: {exc}"
    usage = lib.Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                      cache_read_tokens=cached_tokens or None, cache_write_tokens=cache_write_tokens or None)
    for provider in dict.fromkeys((protocols.get(protocol).price_provider, None)):
        try:
            price = lib.calc_price(usage, model, provider_id=provider)
        except LookupError:
            continue
        except Exception as exc:  # the table cannot price this usage shape: say so, keep the tokens
            return None, f"genai-prices could not price {model!r}: {type(exc).__name__}: {exc}"
        return float(price.total_price), None
    return None, f"model {model!r} is not in the genai-prices table"
