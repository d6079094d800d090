"""
Queen Python client tests
"""

