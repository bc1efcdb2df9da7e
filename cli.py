"""Run the command line from a checkout: ``python cli.py ARGS`` behaves as ``llm-fsm ARGS``."""

from llm_fsm.cli import entry_point

if __name__ == "__main__":
    entry_point()
