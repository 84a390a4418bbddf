"""The tokenizer: trained on the training rows only, ids in a canonical order, texts encoded in chunks.

WordPiece (BERT's normalizer and pre-tokenizer), byte-level BPE, ``bytes`` (one token per UTF-8 byte, the
Long Range Arena Text setting, Tay et al. 2021) or ``word_level`` (one token per whitespace-separated word, for
generated tasks whose words are symbols), all with HF ``tokenizers``.
"""

from __future__ import annotations

import json

PAD_TOKEN, UNK_TOKEN, SEP_TOKEN = "[PAD]", "[UNK]", "[SEP]"
#: special tokens that stand for no text: padding and the pair separator (``[UNK]`` stands for a word the
#: vocabulary lacks, so it counts as text)
NO_TEXT_TOKENS = (PAD_TOKEN, SEP_TOKEN)


def continuing_symbols(tokenizer, texts: list[str], prefix: str) -> list[str]:
    """``prefix + c`` for every character ``c`` that occurs after the first position of a word, sorted.

    Words are what ``tokenizer``'s normalizer and pre-tokenizer make of ``texts`` (the words a trainer
    counts); ``texts`` are normalized and pre-tokenized in chunks of about 1 MB.
    """
    chars: set[str] = set()
    for start in range(0, len(texts), 2048):
        joined = "\n".join(texts[start : start + 2048])
        if tokenizer.normalizer is not None:
            joined = tokenizer.normalizer.normalize_str(joined)
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(joined):
            chars.update(word[1:])
    return [prefix + c for c in sorted(chars)]


def canonical_token_ids(tokenizer, keep_added: list[str] | None = None):
    """The same tokenizer with its vocabulary renumbered: special tokens first, then the rest sorted.

    Ids follow the vocabulary's sorted order, so the same token gets the same
    id — and, with one seed, the same embedding initialisation — and the
    saved ``tokenizer.json`` is the same bytes whatever order a trainer
    assigned them in. Only the ids change: WordPiece and BPE segment by token
    strings (and BPE's merges are stored as strings).

    Args:
        keep_added: the added (special) tokens to keep as such; other added tokens become plain vocabulary
            entries. ``None`` keeps them all.
    """
    from tokenizers import Tokenizer

    data = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    if keep_added is not None:
        data["added_tokens"] = [t for t in data.get("added_tokens", []) if t["content"] in keep_added]
    special = sorted((t["content"] for t in data.get("added_tokens", []) if t["content"] in vocab), key=vocab.get)
    ordered = special + sorted(t for t in vocab if t not in set(special))
    data["model"]["vocab"] = {token: i for i, token in enumerate(ordered)}
    for added in data.get("added_tokens", []):
        added["id"] = data["model"]["vocab"].get(added["content"], added["id"])
    return Tokenizer.from_str(json.dumps(data))


def encode_ids_counting(tokenizer, texts: list[str], seconds: list[str] | None = None, chunk: int = 1024
                        ) -> tuple[list[list[int]], int, list[dict[str, int]], list[int]]:
    """Token ids of ``texts`` (or of the pairs ``(texts[i], seconds[i])``), and what truncation removed, encoded
    ``chunk`` texts at a time (``encode_batch`` keeps a full ``Encoding`` per text; chunks bound that memory).

    Truncation is the tokenizer's own (:func:`train_tokenizer` sets ``longest_first``: a pair loses tokens
    from its longer text first, so the second text keeps its share). Pairs are joined by the tokenizer's
    post-processor (``first [SEP] second``).

    Returns:
        ``(ids, truncated, removed, no_text)``: one id list per row, the number of rows truncated, per text field
        (``texts``, then ``seconds``) ``{"rows": rows that lost tokens, "tokens": tokens removed}``, and the rows
        (indices) of which a text field kept no token that shows text (:func:`blank_token_ids`: e.g. a text
        ``"[PAD]"``, which the tokenizer matches as its special token, or ``"[PAD] [PAD]"``, whose only other token
        is a space). For a pair, a field's removed tokens are its untruncated length (encoded alone, no special
        tokens) minus the tokens of that field kept.
    """
    from tokenizers import Tokenizer

    fields = [texts] if seconds is None else [texts, seconds]
    removed = [{"rows": 0, "tokens": 0} for _ in fields]
    full = None
    if seconds is not None:
        full = Tokenizer.from_str(tokenizer.to_str())
        full.no_truncation()
    ids: list[list[int]] = []
    truncated = 0
    no_text: list[int] = []
    blank = blank_token_ids(tokenizer)
    for start in range(0, len(texts), chunk):
        parts = [f[start : start + chunk] for f in fields]
        encodings = tokenizer.encode_batch(parts[0] if seconds is None else list(zip(*parts)))
        if full is None:  # one field: the overflowing pieces (stride 0) are exactly what was cut
            lost = [[sum(len(o.ids) for o in enc.overflowing)] for enc in encodings]
        else:
            lengths = [[len(e.ids) for e in full.encode_batch(p, add_special_tokens=False)] for p in parts]
            lost = [[lengths[f][j] - enc.sequence_ids.count(f) for f in range(len(fields))]
                    for j, enc in enumerate(encodings)]
        for j, (enc, row_lost) in enumerate(zip(encodings, lost)):
            ids.append(enc.ids)
            if not all(any(s == f and t not in blank for t, s in zip(enc.ids, enc.sequence_ids))
                       for f in range(len(fields))):
                no_text.append(start + j)
            truncated += any(row_lost)
            for f, n in enumerate(row_lost):
                removed[f]["rows"] += n > 0
                removed[f]["tokens"] += n
    return ids, truncated, removed, no_text


def blank_token_ids(tokenizer) -> set[int]:
    """The ids of ``tokenizer``'s tokens that show no text: :data:`NO_TEXT_TOKENS` and every token that decodes to
    no visible character (:func:`attnbench.data.rows.has_visible_character`: a space, a zero-width character).
    ``[UNK]`` shows text (a word the vocabulary lacks), as does a lone byte of a longer character (U+FFFD)."""
    from attnbench.data.rows import has_visible_character

    n = tokenizer.get_vocab_size()
    shown = tokenizer.decode_batch([[i] for i in range(n)], skip_special_tokens=False)
    blank = {i for i, text in enumerate(shown) if not has_visible_character(text)}
    return blank | ({tokenizer.token_to_id(t) for t in NO_TEXT_TOKENS} - {None})


def _with_pipeline(tok, kind: str, lowercase: bool):
    """``tok`` with the normalizer and pre-tokenizer of tokenizer ``kind`` (what decides a text's words)."""
    from tokenizers import normalizers, pre_tokenizers

    if kind == "wordpiece":
        tok.normalizer = normalizers.BertNormalizer(lowercase=bool(lowercase))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        return tok
    if kind == "word_level":
        if lowercase:
            tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        return tok
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = (pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False) if kind == "bytes" else
                         pre_tokenizers.ByteLevel(add_prefix_space=True))
    return tok


def token_counts(texts: list[str], kind: str, lowercase: bool, chunk: int = 1024) -> list[int]:
    """How many words the tokenizer of ``kind`` cuts each text into, before any vocabulary is learned.

    The count comes from the tokenizer's own normalizer and pre-tokenizer (BERT's normalizer drops control
    characters, zero-width spaces, U+FEFF, soft hyphens and the accents it strips; the byte-level ones keep every
    byte) run by a one-entry word-level model, so 0 means the trained tokenizer gives the text 0 tokens: a
    WordPiece or BPE model turns every word into at least one token (``[UNK]`` at worst).
    """
    from tokenizers import Tokenizer, models

    tok = _with_pipeline(Tokenizer(models.WordLevel({UNK_TOKEN: 0}, unk_token=UNK_TOKEN)), kind, lowercase)
    return [len(enc.ids) for start in range(0, len(texts), chunk)
            for enc in tok.encode_batch(texts[start : start + chunk])]


def train_tokenizer(texts: list[str], kind: str, vocab_size: int, lowercase: bool, min_frequency: int,
                    max_length: int, extra_special: tuple[str, ...] = (), pair_separator: str | None = None):
    """A tokenizer trained on ``texts`` that truncates to ``max_length`` tokens, longest text first.

    Args:
        texts: the training texts (only these are seen; validation and test never are).
        kind: ``wordpiece`` | ``byte_bpe`` | ``bytes`` (one token per UTF-8 byte, nothing learned;
            ``vocab_size`` and ``min_frequency`` are ignored) | ``word_level`` (one token per whitespace-separated
            word, the ``vocab_size`` most frequent words of at least ``min_frequency`` occurrences; other words
            are ``[UNK]``).
        vocab_size, min_frequency, lowercase: the trainer's settings.
        max_length: truncation length in tokens (>= 1).
        extra_special: special tokens after ``[PAD]`` and ``[UNK]`` (``[SEP]`` for sentence pairs), matched
            whole in a text and never split.
        pair_separator: for sentence pairs, a special token (one of ``extra_special``) that the post-processor
            puts between the two texts of ``encode((first, second))``; ``texts`` are then both texts of every
            pair, as separate texts.

    Returns:
        A ``tokenizers.Tokenizer``: ``[PAD]`` id 0, ``[UNK]`` id 1, then ``extra_special``, then the vocabulary in
        sorted order (:func:`canonical_token_ids`).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    special = [PAD_TOKEN, UNK_TOKEN, *extra_special]
    if kind == "wordpiece":
        tok = _with_pipeline(Tokenizer(models.WordPiece(unk_token=UNK_TOKEN)), kind, lowercase)
        tok.decoder = decoders.WordPiece()
        # The trainer gives each continuing-subword symbol ("##e") its id when it first meets it while
        # walking the word counts, a hash map whose order Rust randomises per process, and breaks ties
        # between equally frequent merges by those ids: two processes learned different vocabularies.
        # Registering every such symbol up front, in sorted order (as extra special tokens, the trainer's
        # first ids), makes the ids, hence every tie, the same in every process. They are plain
        # vocabulary entries again afterwards (not added tokens), so "##e" in a text is not matched whole.
        continuing = continuing_symbols(tok, texts, "##")
        trainer = trainers.WordPieceTrainer(
            vocab_size=int(vocab_size), min_frequency=int(min_frequency),
            special_tokens=special + continuing, continuing_subword_prefix="##",
        )
    elif kind == "bytes":
        # One token per UTF-8 byte, nothing learned: the Long Range Arena "Text" setting (Tay et al. 2021).
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        vocab = {token: i for i, token in enumerate(special + alphabet)}
        tok = _with_pipeline(Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN)), kind, lowercase)
        tok.decoder = decoders.ByteLevel()
        if extra_special:
            tok.add_special_tokens(list(extra_special))
        return _finish(tok, max_length, pair_separator)
    elif kind == "word_level":
        # one token per whitespace-separated word (punctuation stays inside the word: "k12=v3" is one token)
        tok = _with_pipeline(Tokenizer(models.WordLevel(unk_token=UNK_TOKEN)), kind, lowercase)
        trainer = trainers.WordLevelTrainer(vocab_size=int(vocab_size), min_frequency=int(min_frequency),
                                            special_tokens=special)
    else:
        tok = _with_pipeline(Tokenizer(models.BPE(unk_token=UNK_TOKEN)), kind, lowercase)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=int(vocab_size),
            min_frequency=int(min_frequency),
            special_tokens=special,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok = canonical_token_ids(tok, keep_added=special)
    return _finish(tok, max_length, pair_separator)


def _finish(tok, max_length: int, pair_separator: str | None):
    """``tok`` truncating to ``max_length`` tokens with the ``longest_first`` strategy (a pair is cut from its
    longer text until both fit; the separator counts), and joining pairs as ``$A <separator> $B``."""
    from tokenizers import processors

    if pair_separator is not None:
        tok.post_processor = processors.TemplateProcessing(
            single="$A", pair=f"$A {pair_separator} $B:1",
            special_tokens=[(pair_separator, tok.token_to_id(pair_separator))])
    tok.enable_truncation(max_length, strategy="longest_first")
    return tok
