"""One Powertools resolver per surface; each module's `handler` is a Lambda entry point."""
