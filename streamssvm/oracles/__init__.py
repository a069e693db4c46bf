"""Searches built on the structures' oracles (MIPS over class weights; slack-rescaling searches later)."""
