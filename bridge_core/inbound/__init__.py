"""bridge_core.inbound"""
