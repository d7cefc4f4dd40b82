"""Helpers the test modules share: connecting stock clients over real transports, and calling tools."""
