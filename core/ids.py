"""Identifiers: 21-character nanoids, as the spec uses for every primary key."""

from nanoid import generate

ALPHABET = "_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
ID_LENGTH = 21
MOCK_USER_ID = "0" * ID_LENGTH


def new_id() -> str:
    return generate(ALPHABET, ID_LENGTH)
