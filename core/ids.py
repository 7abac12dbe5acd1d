"""Identifiers: 21-character nanoids, as the spec uses for every primary key."""

import secrets

from nanoid import generate

ALPHABET = "_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# Ids go on command lines (`malamar mcp --workspace ID`, `malamar export ID`), where a leading
# dash reads as an option: a new id never starts with one (older ids may; callers pass them as
# `--workspace=ID`).
FIRST_CHARACTERS = ALPHABET.replace("-", "")
ID_LENGTH = 21
MOCK_USER_ID = "0" * ID_LENGTH


def new_id() -> str:
    return secrets.choice(FIRST_CHARACTERS) + generate(ALPHABET, ID_LENGTH - 1)
