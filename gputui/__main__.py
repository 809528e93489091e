from gputui.cli import entry

entry()
