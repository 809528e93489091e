"""Screens: the monitor, process detail, help, findings and the signal dialog."""
