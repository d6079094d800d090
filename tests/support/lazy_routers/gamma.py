from aws_lambda_powertools.event_handler.api_gateway import Router

router = Router()


@router.get("/c")
def one() -> dict:
    return {"module": "gamma"}
