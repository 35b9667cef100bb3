"""A small inventory module with lint errors for the AgentOS demo to fix."""
import os, sys
import json
from collections import OrderedDict


def total_value(items):
    total = 0
    for item in items:
        total += item["price"] * item["quantity"]
    return total


def describe(items):
    print(f"inventory report")
    return "%d items worth %.2f" % (len(items), total_value(items))
