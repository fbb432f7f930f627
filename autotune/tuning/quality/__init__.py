"""Quality measurement: the guardrail that checks a trial's answers against reference
outputs (`guardrail`: log-prob drift and agreement), the task check's items (`tasks`) and
their paired accuracy and verdict (`accuracy`).
"""
