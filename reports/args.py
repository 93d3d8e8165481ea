"""The command-line habit of the scripts: bad input is one line naming the flag, and exit 2."""
import argparse

EXIT_BAD_INPUT = 2


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse's usage block would make it several lines
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message}\n")
