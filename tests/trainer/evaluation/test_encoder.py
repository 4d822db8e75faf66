"""trainer.evaluation.encoder's token ids: each sentence tokenised once per process and tokenizer, the ids the
tokenizer itself gives (checked against a direct call of the tokenizer)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from trainer.evaluation import encoder as encoder_mod
from trainer.evaluation.encoder import token_ids
from trainer.models import tokenizer_digest

SENTENCES = ["a man is playing the guitar .", "two", "a dog runs .", "a man is playing the guitar ."]


class CountingTokenizer:
    """A tokenizer that records the texts each call tokenised."""

    def __init__(self, tokenizer):
        self.tokenizer, self.backend_tokenizer, self.calls = tokenizer, tokenizer.backend_tokenizer, []

    def __call__(self, texts, **kwargs):
        self.calls.append(list(texts))
        return self.tokenizer(texts, **kwargs)


@pytest.fixture
def tokenizer(embedded_model_dir, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setattr(encoder_mod, "TOKEN_IDS", {})  # this test's cache, empty
    return AutoTokenizer.from_pretrained(embedded_model_dir)


def direct(tokenizer, sentences, limit):
    return tokenizer(list(sentences), add_special_tokens=True, truncation=True, max_length=limit)["input_ids"]


def test_the_ids_are_the_tokenizers_and_each_sentence_is_tokenised_once(tokenizer):
    counting = CountingTokenizer(tokenizer)
    first = token_ids(counting, SENTENCES, 512)
    assert [list(row) for row in first] == direct(tokenizer, SENTENCES, 512)
    assert counting.calls == [SENTENCES[:3]]  # the repeated sentence once
    more = ["two", "a cat sleeps on the sofa ."]
    assert [list(row) for row in token_ids(counting, more, 512)] == direct(tokenizer, more, 512)
    assert counting.calls[1:] == [["a cat sleeps on the sofa ."]]  # only the sentence not seen before
    assert all(row.dtype == np.int32 for row in first)


def test_a_length_limit_or_another_vocabulary_is_tokenised_apart(tokenizer):
    long = ["one two three four five six seven eight nine ten"]
    assert [list(row) for row in token_ids(tokenizer, long, 512)] == direct(tokenizer, long, 512)
    assert [list(row) for row in token_ids(tokenizer, long, 6)] == direct(tokenizer, long, 6)
    assert len(token_ids(tokenizer, long, 6)[0]) == 6

    grown = copy.deepcopy(tokenizer)
    grown.add_tokens(["guitarsolo"])
    assert tokenizer_digest(grown) != tokenizer_digest(tokenizer)
    text = ["a guitarsolo ."]
    assert [list(row) for row in token_ids(tokenizer, text, 512)] == direct(tokenizer, text, 512)
    assert [list(row) for row in token_ids(grown, text, 512)] == direct(grown, text, 512)
    assert direct(grown, text, 512) != direct(tokenizer, text, 512)


def test_the_digest_is_the_same_for_the_same_tokenizer_whatever_its_last_call_set(tokenizer, embedded_model_dir):
    from transformers import AutoTokenizer

    before = tokenizer_digest(tokenizer)
    again = AutoTokenizer.from_pretrained(embedded_model_dir)
    again("some text", truncation=True, max_length=7, padding="max_length")  # sets the backend's truncation
    state = again.backend_tokenizer.truncation, again.backend_tokenizer.padding
    assert state[0] is not None and state[1] is not None
    assert tokenizer_digest(again) == before
    assert (again.backend_tokenizer.truncation, again.backend_tokenizer.padding) == state  # left as it was


def test_the_cache_starts_over_past_its_bound_and_stays_right(tokenizer, monkeypatch):
    monkeypatch.setattr(encoder_mod, "MAX_CACHED_SENTENCES", 3)
    counting = CountingTokenizer(tokenizer)
    token_ids(counting, SENTENCES, 512)
    rows = token_ids(counting, ["a bird sings .", "two"], 512)
    assert [list(row) for row in rows] == direct(tokenizer, ["a bird sings .", "two"], 512)
    assert sum(map(len, encoder_mod.TOKEN_IDS.values())) <= 3
