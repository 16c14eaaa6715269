"""Pure text processing: chunkers, token counting, hashing. No I/O, no session."""
