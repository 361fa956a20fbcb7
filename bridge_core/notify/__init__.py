"""bridge_core.notify"""
