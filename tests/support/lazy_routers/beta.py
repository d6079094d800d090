from aws_lambda_powertools.event_handler.api_gateway import Router

router = Router()


@router.get("/b")
def one() -> dict:
    return {"module": "beta"}
