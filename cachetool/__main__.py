from cachetool.cli import entry

entry()
