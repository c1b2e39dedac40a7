"""The Strata broker: asyncio + uvloop server, request routing, the `strata` command."""
