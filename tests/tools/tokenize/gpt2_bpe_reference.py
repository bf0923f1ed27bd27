#!/usr/bin/env python3
"""An independent GPT-2 BPE for the tokenizer tests.

The encoder is OpenAI's gpt-2/src/encoder.py (bytes_to_unicode, get_pairs,
Encoder.bpe and Encoder.encode as published), run with the `regex` module;
the trainer makes small vocabularies in GPT-2's formats for it, so that no
test downloads one.

  train TEXT_FILE MERGES OUT_DIR
      learns up to MERGES merges over the GPT-2 pieces of TEXT_FILE and writes
      OUT_DIR/vocab.json and merges.txt (OpenAI's formats), tokenizer.json
      (Hugging Face's, merges as "left right") and tokenizer_pairs.json
      (merges as [left, right]). Ids: the 256 byte tokens in GPT-2's order,
      then the merges, then <|endoftext|>.
  encode VOCAB MERGES TEXTS_JSON
      prints a JSON list with the tokens of each string of the JSON list in
      TEXTS_JSON.
"""

import collections
import json
import os
import sys

import regex as re

PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
END_OF_TEXT = "<|endoftext|>"


# --- encoder.py, unchanged but for the lru_cache (not needed here) ---------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    cs = [chr(n) for n in cs]
    return dict(zip(bs, cs))


def get_pairs(word):
    pairs = set()
    prev_char = word[0]
    for char in word[1:]:
        pairs.add((prev_char, char))
        prev_char = char
    return pairs


class Encoder:
    def __init__(self, encoder, bpe_merges):
        self.encoder = encoder
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.cache = {}
        self.pat = re.compile(PATTERN)

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)

        if not pairs:
            return token

        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break

                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            new_word = tuple(new_word)
            word = new_word
            if len(word) == 1:
                break
            else:
                pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        bpe_tokens = []
        for token in re.findall(self.pat, text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            bpe_tokens.extend(self.encoder[bpe_token] for bpe_token in self.bpe(token).split(" "))
        return bpe_tokens


def get_encoder(vocab_path, merges_path):
    with open(vocab_path, "r", encoding="utf-8") as f:
        encoder = json.load(f)
    with open(merges_path, "r", encoding="utf-8") as f:
        bpe_data = f.read()
    bpe_merges = [tuple(merge_str.split()) for merge_str in bpe_data.split("\n")[1:-1]]
    return Encoder(encoder=encoder, bpe_merges=bpe_merges)


# --- the trainer ------------------------------------------------------------

def merge_word(word, pair):
    merged = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            merged.append(word[i] + word[i + 1])
            i += 2
        else:
            merged.append(word[i])
            i += 1
    return tuple(merged)


def train(text, merge_count):
    """GPT-2's vocabulary and merges: the most frequent adjacent pair of the
    pieces' symbols, merged merge_count times (ties broken by the pair)."""
    byte_encoder = bytes_to_unicode()
    words = collections.Counter(
        tuple(byte_encoder[b] for b in piece.encode("utf-8")) for piece in re.findall(PATTERN, text))
    vocab = {character: i for i, character in enumerate(byte_encoder.values())}
    merges = []
    for _ in range(merge_count):
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        merges.append(best)
        vocab.setdefault(best[0] + best[1], len(vocab))
        merged_words = collections.Counter()
        for word, count in words.items():
            merged_words[merge_word(word, best)] += count
        words = merged_words
    vocab[END_OF_TEXT] = len(vocab)
    return vocab, merges


def hugging_face_json(vocab, merges):
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab[END_OF_TEXT], "content": END_OF_TEXT, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab, "merges": merges},
    }


def write_training(text_path, merge_count, out_dir):
    with open(text_path, "r", encoding="utf-8") as f:
        vocab, merges = train(f.read(), merge_count)
    # Escaped like GPT-2's own encoder.json ("\u0120the").
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for left, right in merges:
            f.write(f"{left} {right}\n")
    # Raw UTF-8, as Hugging Face writes it.
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(hugging_face_json(vocab, [f"{l} {r}" for l, r in merges]), f, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_pairs.json"), "w", encoding="utf-8") as f:
        json.dump(hugging_face_json(vocab, [[l, r] for l, r in merges]), f, ensure_ascii=False)


def main(argv):
    if len(argv) == 5 and argv[1] == "train":
        write_training(argv[2], int(argv[3]), argv[4])
    elif len(argv) == 5 and argv[1] == "encode":
        encoder = get_encoder(argv[2], argv[3])
        with open(argv[4], "r", encoding="utf-8") as f:
            texts = json.load(f)
        print(json.dumps([encoder.encode(text) for text in texts]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
